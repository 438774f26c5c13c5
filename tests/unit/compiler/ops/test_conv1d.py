"""1-D convolutions (audio, sequence models) run as (k, 1) 2-D ones over the (N, C, L, 1) view."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit

RNG = np.random.default_rng(11)
C, L = 16, 48


def _net() -> onnx.ModelProto:
    """conv(k=5, pad 2) -> BN -> relu -> conv(k=3, SAME_UPPER) + skip -> relu -> depthwise conv(k=3) ->
    strided conv(k=4, stride 2) -> y: a 1-D residual block of the kinds audio models use."""
    w = {"w0": (C, C, 5), "w1": (C, C, 3), "wd": (C, 1, 3), "ws": (C, C, 4)}
    inits = [numpy_helper.from_array((RNG.standard_normal(s) * 0.2).astype(np.float32), k) for k, s in w.items()]
    inits += [numpy_helper.from_array(v.astype(np.float32), k) for k, v in
              {"g": RNG.uniform(0.5, 1.5, C), "b": RNG.standard_normal(C) * 0.1, "m": RNG.standard_normal(C) * 0.1,
               "v": RNG.uniform(0.5, 1.5, C)}.items()]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="c0", kernel_shape=[5], pads=[2, 2]),
             helper.make_node("BatchNormalization", ["c0", "g", "b", "m", "v"], ["n0"]),
             helper.make_node("Relu", ["n0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], name="c1", auto_pad="SAME_UPPER"),
             helper.make_node("Add", ["c1", "r0"], ["s"], name="skip"),
             helper.make_node("Relu", ["s"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd"], ["d"], name="dw", pads=[1, 1], group=C),
             helper.make_node("Conv", ["d", "ws"], ["y"], name="strided", kernel_shape=[4], strides=[2])]
    g = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, L])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, (L - 4) // 2 + 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled():
    model = _net()
    cal = [RNG.standard_normal((1, C, L)).astype(np.float32) for _ in range(4)]
    return model, vtakit.compile(model, target="cpu"), vtakit.compile(model, "pynq", calibrate=cal)


def test_the_float_1d_convolution_matches_onnxruntime(compiled):
    model, float_module, _ = compiled
    x = RNG.standard_normal((1, C, L)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(float_module.run(x, device="cpu")["y"], want, rtol=1e-4, atol=1e-5)


def test_1d_convolutions_run_on_the_accelerator_bit_exactly(compiled):
    model, float_module, module = compiled
    on_vta = {t.node for t in module.vta_tasks()}
    assert {"c0", "c1", "strided"} <= on_vta  # the skip add is fused into c1's task (passes.fusion); a (2, 1)
    # stride over a one-column view is the accelerator's stride 2 (graph_ops._width_one)
    x = RNG.standard_normal((1, C, L)).astype(np.float32)
    ref = module.run(x, device="cpu")["y"]
    assert np.array_equal(module.run(x, device="sim")["y"], ref)
    want = float_module.run(x, device="cpu")["y"]
    assert float(ref.ravel() @ want.ravel() / np.linalg.norm(ref) / np.linalg.norm(want)) > 0.99
