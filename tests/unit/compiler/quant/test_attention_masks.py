"""Additive attention masks (finfo.min, -1e9, -inf) stay float exactly: calibration never takes them as a range."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.quant.precision import OUT_OF_REACH
from vtakit.compiler.quant.quantize import unrepresentable

RNG = np.random.default_rng(8)
S = 8


def _masked_scores(fill: float, where: bool) -> onnx.ModelProto:
    """scores = conv(x) (on the accelerator) + mask, softmax over the last axis; the mask is (1 - m) * fill
    (Hugging Face's finfo.min form) or Where(m, 0, fill) (the -inf form), m a 0/1 input."""
    inits = [numpy_helper.from_array((RNG.standard_normal((16, 16, 1, 1)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(np.float32(1.0), "one"), numpy_helper.from_array(np.float32(0.0), "zero"),
             numpy_helper.from_array(np.float32(fill), "fill")]
    make_mask = ([helper.make_node("Cast", ["m"], ["mb"], to=TensorProto.BOOL),
                  helper.make_node("Where", ["mb", "zero", "fill"], ["mask"])] if where else
                 [helper.make_node("Sub", ["one", "m"], ["inv"]), helper.make_node("Mul", ["inv", "fill"], ["mask"])])
    nodes = [helper.make_node("Conv", ["x", "w"], ["scores"], name="scores"), *make_mask,
             helper.make_node("Add", ["scores", "mask"], ["masked"], name="apply_mask"),
             helper.make_node("Softmax", ["masked"], ["y"], axis=-1)]
    shape = [1, 16, 1, S]
    g = helper.make_graph(nodes, "masked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                                            helper.make_tensor_value_info("m", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("fill, where", [(float(np.finfo(np.float32).min), False), (-1e9, False), (-np.inf, True)])
def test_an_additive_mask_and_its_add_stay_float_and_masked_positions_get_exactly_zero(fill, where):
    model = _masked_scores(fill, where)
    m = np.ones((1, 16, 1, S), np.float32)
    m[..., 5:] = 0
    cal = [{"x": RNG.standard_normal((1, 16, 1, S)).astype(np.float32), "m": m} for _ in range(4)]
    module = vtakit.compile(model, "pynq", calibrate=cal)
    assert module.notes.host_reasons["apply_mask"] == f"kept in float: {OUT_OF_REACH}"
    assert [t.node for t in module.vta_tasks()] == ["scores"]
    got = module.run(cal[0], device="sim")["y"]
    assert np.all(got[..., 5:] == 0) and np.allclose(got.sum(axis=-1), 1, atol=1e-6)
    want = vtakit.compile(model, target="cpu").run(cal[0], device="cpu")["y"]
    assert float(np.abs(got - want).max()) < 0.05


def test_unrepresentable_ranges():
    assert unrepresentable({"a": 3.0, "b": float("inf"), "c": float("nan"), "d": 1e9, "e": 127.0 * 2 ** 16}) == {"b", "c", "d"}
