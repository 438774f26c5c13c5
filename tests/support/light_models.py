"""The onnx package's light model-zoo architectures (onnx/backend/test/data/light), made runnable:
their weights come from ConstantOfShape nodes (every weight 0.02), replaced here by seeded ones
scaled so activations stay O(1), and the final Softmax dropped so logits are compared."""

from __future__ import annotations

import os

import numpy as np

NAMES = ("resnet50", "vgg19", "squeezenet", "inception_v1", "densenet121", "inception_v2", "shufflenet",
         "zfnet512", "bvlc_alexnet")


def path(name: str) -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def available() -> bool:
    return all(os.path.exists(path(n)) for n in NAMES)


def _weight(rng: np.random.Generator, shape: tuple[int, ...], users: list[tuple[str, int, object]]) -> np.ndarray:
    """A seeded value for a parameter by what reads it (conv/gemm weight, bias, batch-norm statistic)."""
    op, idx, node = users[0]
    if op == "BatchNormalization":
        if idx in (1, 4):  # scale, variance
            return rng.uniform(0.5, 1.5, shape).astype(np.float32)
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if op == "Mul":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if op in ("Conv", "Gemm", "MatMul") and idx == 1 and len(shape) >= 2:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute) if op == "Gemm" else False
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else (shape[1] if trans_b else shape[0])
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    return (0.01 * rng.standard_normal(shape)).astype(np.float32)


def load(name: str, seed: int = 0):
    """The model with seeded weights and logits as its output."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(path(name))
    g = m.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    users: dict[str, list] = {}
    for n in g.node:
        for k, i in enumerate(n.input):
            users.setdefault(i, []).append((n.op_type, k, n))
    rng = np.random.default_rng(seed)
    keep, new_inits = [], []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(s) for s in inits[n.input[0]])
            new_inits.append(numpy_helper.from_array(_weight(rng, shape, users[n.output[0]]), n.output[0]))
        else:
            keep.append(n)
    last = keep[-1]
    if last.op_type == "Softmax" and last.output[0] == g.output[0].name:
        keep.pop()
        out = helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None)
        del g.output[:]
        g.output.append(out)
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in keep for i in n.input}
    weights = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(weights + new_inits)
    names = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name in used and (i.name in names or i.name not in inits)]
    del g.input[:]
    g.input.extend(inputs)  # IR 3: initializers stay listed among the inputs
    for i in new_inits:
        g.input.append(helper.make_tensor_value_info(i.name, onnx.TensorProto.FLOAT, list(i.dims)))
    return m


def data_input(model) -> tuple[str, tuple[int, ...]]:
    names = {i.name for i in model.graph.initializer}
    (vi,) = [i for i in model.graph.input if i.name not in names]
    return vi.name, tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def onnxruntime_logits(model, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    name, _ = data_input(model)
    return sess.run(None, {name: x})[0]
