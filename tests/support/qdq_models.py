"""QDQ test models: ONNX Runtime's static quantizer applied to a float model (`ort_qdq`), and the same
model with every scale moved to a power of two (`power_of_two`), which the accelerator expresses exactly."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def ort_qdq(float_model: onnx.ModelProto, out: Path, samples: list[dict[str, np.ndarray]], *,
            per_channel: bool, symmetric: bool = True, uint8: bool = False) -> onnx.ModelProto:
    """quantize_static with QuantFormat.QDQ (int8 symmetric by default; `uint8`: ORT's default asymmetric
    uint8 activations), written to `out` and returned."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    src = out.with_name(out.stem + ".float.onnx")
    onnx.save(float_model, str(src))
    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8 if uint8 else QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options=dict(ActivationSymmetric=symmetric and not uint8, WeightSymmetric=True))
    return onnx.load(str(out))


def _pow2(scale: np.ndarray) -> np.ndarray:
    """The power of two at or above each scale (never clips the model's range)."""
    return np.array([2.0 ** math.ceil(math.log2(float(s))) for s in scale.reshape(-1)],
                    np.float32).reshape(scale.shape)


def power_of_two(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every int8 scale of a QDQ model moved up to a power of two, the int8 weights requantized to it;
    int32 biases become float initializers (as PyTorch QAT exports leave them)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    new: dict[str, np.ndarray] = {}
    keep = []
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and inits.get(n.input[0], np.zeros(0)).dtype == np.int32:
            q, s = inits[n.input[0]], inits[n.input[1]]
            new[n.output[0]] = (q.astype(np.float64) * s).astype(np.float32)
            continue
        keep.append(n)
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        s = inits[n.input[1]]
        p = _pow2(s)
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:  # int8 weights
            q = inits[n.input[0]]
            shape = [1] * q.ndim
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
            if s.size > 1:
                shape[axis] = s.size
            new[n.input[0]] = np.clip(np.rint(q * (s / p).reshape(shape)), -127, 127).astype(np.int8)
        new[n.input[1]] = p
    del m.graph.node[:]
    m.graph.node.extend(keep)
    for name, v in new.items():
        inits[name] = v
    used = {i for n in m.graph.node for i in n.input}
    del m.graph.initializer[:]
    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in inits.items() if k in used)
    onnx.checker.check_model(m)
    return m


def ort_run(model: onnx.ModelProto | str, x: np.ndarray, *, as_written: bool = False) -> np.ndarray:
    """The model's first output on onnxruntime's CPU provider; `as_written`: without graph optimizations
    (ORT's fused int8 kernels round differently from the QDQ graph's own semantics)."""
    import onnxruntime as ort

    src = model if isinstance(model, str) else model.SerializeToString()
    opts = ort.SessionOptions()
    if as_written:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def qlinear_conv_model(wq: np.ndarray, x_scale: float, w_scale: float, y_scale: float) -> onnx.ModelProto:
    """QuantizeLinear -> QLinearConv (3x3, pads 1, int8, zero points 0, node "qconv") -> DequantizeLinear
    on a float input "x" of the weights' channels and 8x8, at opset 13: a pre-quantized model as a
    quantizer writes it."""
    from onnx import TensorProto, helper

    zero = np.array(0, np.int8)
    inits = [numpy_helper.from_array(np.array(x_scale, np.float32), "xs"), numpy_helper.from_array(zero, "xzp"),
             numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(w_scale, np.float32), "ws"),
             numpy_helper.from_array(zero, "wzp"), numpy_helper.from_array(np.array(y_scale, np.float32), "ys"),
             numpy_helper.from_array(zero, "yzp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xzp", "wq", "ws", "wzp", "ys", "yzp"], ["yq"],
                              pads=[1, 1, 1, 1], name="qconv"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["y"])]
    shape = [1, wq.shape[1], 8, 8]
    graph = helper.make_graph(nodes, "qlinear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, wq.shape[0], 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
