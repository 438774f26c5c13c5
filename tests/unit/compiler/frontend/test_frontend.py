"""ONNX frontend: zoo models import with the right ops, bad models fail with one clear CompileError."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vtakit.compiler import zoo
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.errors import CompileError


def _model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_resnet18_imports_with_shapes():
    g = import_onnx(zoo.build("resnet18"))
    counts = g.op_counts()
    assert counts["Conv"] == 20 and counts["BatchNormalization"] == 20 and counts["Add"] == 8
    assert g.tensors["logits"].shape == (1, 1000)
    assert g.notes["opset"] == 13


@pytest.mark.parametrize("opset", [11, 17, 21])
def test_small_cnn_opsets_give_the_same_graph_shape(opset):
    ref = import_onnx(zoo.build("small_cnn", opset=13))
    g = import_onnx(zoo.build("small_cnn", opset=opset))
    assert g.op_counts() == ref.op_counts()
    assert g.tensors["probs"].shape == ref.tensors["probs"].shape


def test_symbolic_batch_defaults_to_one_and_can_be_set():
    g = import_onnx(zoo.build("digits_cnn"))
    assert g.tensors["data"].shape == (1, 1, 8, 8) and g.notes["defaulted_dims"] == ["data:N"]
    g = import_onnx(zoo.build("digits_cnn"), input_shapes={"data": (32, 1, 8, 8)})
    assert g.tensors["logits"].shape == (32, 10) and g.notes["defaulted_dims"] == []
    with pytest.raises(CompileError, match="contradicts"):
        import_onnx(zoo.build("digits_cnn"), input_shapes={"data": (32, 3, 8, 8)})
    with pytest.raises(CompileError, match="unknown inputs"):
        import_onnx(zoo.build("digits_cnn"), input_shapes={"image": (1, 1, 8, 8)})


def test_unsupported_ops_are_all_listed_before_any_work():
    nodes = [helper.make_node("Gelu2", ["x"], ["a"], name="g1"), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Gelu2", ["b"], ["c"], name="g2"),
             helper.make_node("FusedConv", ["c"], ["y"], name="fc", domain="com.microsoft")]
    m = _model(nodes, [_vi("x", [1, 4, 2, 2])], [_vi("y", [1, 4, 2, 2])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(CompileError) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "Gelu2 (g1, g2)" in msg and "com.microsoft.FusedConv (fc)" in msg and "\n" not in msg


def test_malformed_and_truncated_files(tmp_path):
    good = zoo.build("small_cnn").SerializeToString()
    (tmp_path / "garbage.onnx").write_bytes(b"\x08\x07garbage" * 10)
    (tmp_path / "half.onnx").write_bytes(good[: len(good) // 2])
    (tmp_path / "empty.onnx").write_bytes(b"")
    for name in ("garbage.onnx", "half.onnx", "empty.onnx"):
        with pytest.raises(CompileError) as e:
            import_onnx(tmp_path / name)
        assert "\n" not in str(e.value)
    with pytest.raises(CompileError, match="cannot read"):
        import_onnx(tmp_path / "missing.onnx")


def test_unsupported_opset():
    for opset in (5, 99):  # Relu changed at 6; below 7 is taken only when no op changed
        m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 2])], [_vi("y", [1, 2])], opset=opset)
        with pytest.raises(CompileError, match=f"opset {opset} is not supported"):
            import_onnx(m)


def test_attribute_normalisation():
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    lo = numpy_helper.from_array(np.array(0.0, np.float32), "lo")
    hi = numpy_helper.from_array(np.array(6.0, np.float32), "hi")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    m = _model(nodes, [_vi("x", [1, 3, 7, 7])], [_vi("y", [1, 64])], [w, shape, lo, hi])
    g = import_onnx(m)
    conv, clip, reshape = g.nodes
    assert conv.attrs["pads"] == (1, 1, 1, 1) and conv.attrs["strides"] == (2, 2)
    assert g.tensors["c"].shape == (1, 4, 4, 4)
    assert clip.attrs == dict(lo=0.0, hi=6.0) and clip.inputs == ["c"]
    assert reshape.attrs["shape"] == (1, 64)


def test_bad_shapes_name_the_node():
    w = numpy_helper.from_array(np.ones((4, 5, 3, 3), np.float32), "w")
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="convA")], [_vi("x", [1, 3, 7, 7])],
               [_vi("y", [1, 4, 5, 5])], [w])
    with pytest.raises(CompileError, match="convA"):
        import_onnx(m)


def test_qlinear_conv_becomes_dequantize_conv_quantize():
    rng = np.random.default_rng(0)
    wq = rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
             numpy_helper.from_array(np.array(0, np.int8), "xzp"),
             numpy_helper.from_array(wq, "wq"),
             numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(4, np.int8), "wzp"),
             numpy_helper.from_array(np.array(0.2, np.float32), "ys"),
             numpy_helper.from_array(np.array(0, np.int8), "yzp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xzp", "wq", "ws", "wzp", "ys", "yzp"], ["yq"],
                              pads=[1, 1, 1, 1], name="qconv"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["y"])]
    m = _model(nodes, [_vi("x", [1, 3, 6, 6])], [_vi("y", [1, 4, 6, 6])], inits)
    g = import_onnx(m)
    assert [n.op for n in g.nodes] == ["QuantizeLinear", "DequantizeLinear", "Conv", "QuantizeLinear",
                                       "DequantizeLinear"]
    onnx.checker.check_model(m)


def test_clip_bounds_as_one_element_tensors_read_as_scalars():
    """Exporters write Clip's min/max as shape-(1,) tensors too: read the same, no numpy deprecation;
    a bound with more elements is one error naming the node."""
    for shape, ok in (((1,), True), ((2,), False)):
        lo = numpy_helper.from_array(np.zeros(shape, np.float32), "lo")
        hi = numpy_helper.from_array(np.full(shape, 6.0, np.float32), "hi")
        m = _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clipA")], [_vi("x", [1, 4])],
                   [_vi("y", [1, 4])], [lo, hi])
        if ok:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DeprecationWarning)
                assert import_onnx(m).nodes[0].attrs == dict(lo=0.0, hi=6.0)
        else:
            with pytest.raises(CompileError, match=r"clipA.*Clip min must be a scalar|Clip min must be a scalar.*clipA"):
                import_onnx(m)
