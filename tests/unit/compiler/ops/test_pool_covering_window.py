"""A pooling window larger than its input with ceil_mode (transformers' EfficientNet) is the global pool."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import vtakit


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_a_window_covering_the_input_pools_it_all_as_onnxruntime_does(op):
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2560, 2560], strides=[2560, 2560], ceil_mode=1)
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.random.default_rng(0).standard_normal((1, 8, 7, 7)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = vtakit.compile(model, target="cpu")
    assert [n.op for n in module.graph.nodes] == ["Global" + op]
    np.testing.assert_allclose(module.run(x, device="cpu")["y"], want, rtol=1e-6, atol=1e-6)
