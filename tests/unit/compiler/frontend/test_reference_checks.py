"""Nothing onnx.reference returns is trusted unchecked: a generic node's output is checked against its declared
shape and type when the model is compiled; GlobalMaxPool / GlobalAveragePool of any rank and GatherElements,
which onnx 1.22's reference gets wrong, have kernels of their own.  And symbolic dimensions beyond the batch
take their sizes from the first calibration sample."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

import vtakit
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.ops import onnx_reference
from vtakit.errors import CompileError


def _model(nodes, inputs, outputs, inits=(), opset=13):
    return h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)),
                        opset_imports=[h.make_opsetid("", opset)])


def _vi(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
@pytest.mark.parametrize("shape", [(1, 4, 7), (2, 3, 5, 6), (1, 2, 3, 4, 5)])
def test_global_pools_of_any_rank_keep_the_channels(op, shape):
    """onnx 1.22's reference GlobalMaxPool turns (1, 4, 7) into (1, 1); the Flatten after it would then
    see the wrong shape at run time."""
    model = _model([h.make_node(op, ["x"], ["p"], name="pool"), h.make_node("Flatten", ["p"], ["y"])],
                   [_vi("x", T.FLOAT, shape)], [_vi("y", T.FLOAT, None)])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    graph = import_onnx(model)
    assert graph.tensors["p"].shape == shape[:2] + (1,) * (len(shape) - 2)
    assert not any(n.op.endswith(".generic") for n in graph.nodes)
    got = vtakit.compile(model, target="cpu").run(x)["y"]
    np.testing.assert_allclose(got, _ort(model, {"x": x})[0], rtol=1e-6, atol=1e-7)


def bert_positions(fed: bool):
    """A Hugging Face BERT export's idiom: GatherElements of (1, 512) position data by (1, 128) indices."""
    data = np.arange(512, dtype=np.float32).reshape(1, 512) * 0.25
    idx = np.arange(128, dtype=np.int64).reshape(1, 128)[:, ::-1] - 7  # some negative: from the end
    nodes = [h.make_node("GatherElements", ["data", "idx"], ["pos"], axis=1, name="gather"),
             h.make_node("Add", ["x", "pos"], ["y"])]
    inits = [nh.from_array(data, "data")] + ([] if fed else [nh.from_array(np.ascontiguousarray(idx), "idx")])
    inputs = [_vi("x", T.FLOAT, [1, 128])] + ([_vi("idx", T.INT64, [1, 128])] if fed else [])
    return _model(nodes, inputs, [_vi("y", T.FLOAT, None)], inits), np.ascontiguousarray(idx)


@pytest.mark.parametrize("fed", [False, True])
def test_gather_elements_with_indices_smaller_than_the_data(fed):
    model, idx = bert_positions(fed)
    x = np.random.default_rng(1).standard_normal((1, 128)).astype(np.float32)
    feeds = {"x": x, "idx": idx} if fed else {"x": x}
    got = vtakit.compile(model, target="cpu").run(feeds)["y"]
    np.testing.assert_array_equal(got, _ort(model, feeds)[0])


def test_gather_elements_refuses_an_index_out_of_bounds():
    model, idx = bert_positions(fed=True)
    module = vtakit.compile(model, target="cpu")
    with pytest.raises(CompileError, match=r"'gather' \(GatherElements\): an index .* out of bounds for size 512"):
        module.run({"x": np.zeros((1, 128), np.float32), "idx": idx + 600})


def test_a_reference_result_of_the_wrong_shape_is_refused_at_compile_time(monkeypatch):
    """A generic op (CumSum here) whose evaluation disagrees with ONNX's shape inference: one error naming it."""
    model = _model([h.make_node("CumSum", ["x", "axis"], ["y"], name="running")], [_vi("x", T.FLOAT, [2, 3])],
                   [_vi("y", T.FLOAT, None)], [nh.from_array(np.array(1, np.int64), "axis")])
    assert vtakit.compile(model, target="cpu").run(np.ones((2, 3), np.float32))["y"][1, 2] == 3
    monkeypatch.setattr(onnx_reference, "_CHECKED", {})
    monkeypatch.setitem(onnx_reference.CORRECTED, "CumSum", lambda attrs, args: [np.asarray(args[0]).sum(axis=1)])
    with pytest.raises(CompileError, match=r"'running' \(CumSum\): onnx.reference returns float32 \(2,\) where "
                                           r"ONNX's shape inference declares float32 \(2, 3\)"):
        vtakit.compile(model, target="cpu")
    monkeypatch.setitem(onnx_reference.CORRECTED, "CumSum", lambda attrs, args: [np.cumsum(args[0], 1, dtype=np.float64)])
    with pytest.raises(CompileError, match=r"returns float64 \(2, 3\) where .* declares float32 \(2, 3\)"):
        vtakit.compile(model, target="cpu")


def test_symbolic_dimensions_beyond_the_batch_come_from_the_first_calibration_sample():
    """A model with input [-1, 3, ?, ?] compiles with calibration samples and no input shapes."""
    x = _vi("x", T.FLOAT, [1, 3, 1, 1])
    for d, v in zip(x.type.tensor_type.shape.dim, (-1, 3, -1, -1)):
        d.dim_value = v
    w = np.random.default_rng(2).standard_normal((4, 3, 3, 3)).astype(np.float32)
    model = _model([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])],
                   [x], [_vi("y", T.FLOAT, None)], [nh.from_array(w, "w")])
    cal = [np.random.default_rng(k).random((1, 3, 16, 20)).astype(np.float32) for k in range(4)]
    with pytest.raises(CompileError, match="symbolic dimensions"):
        vtakit.compile(model, target="cpu")
    for target in ("cpu", "vta"):
        module = vtakit.compile(model, target=target, calibrate=cal)
        assert module.inputs["x"].shape == (1, 3, 16, 20) and not module.notes.defaulted_dims
