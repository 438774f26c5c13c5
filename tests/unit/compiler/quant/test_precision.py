"""Issue 22, float stays float: a precision-neutral tail gives exactly the tail of the model without it.

The issue's model is Conv -> Relu -> Reshape -> Gemm -> Softmax; an Identity,
Flatten, Reshape or Transpose after the Softmax used to get a Quantize before it
and a Dequantize after it, putting the probabilities on a 1/128 grid.  Here every
precision-neutral op the compiler supports follows that Softmax (and, where it
does not fuse, the Gemm of an int8-ending variant) on `pynq`, on the cycle model
and on the host reference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.pipeline import optimize
from vtakit.compiler.frontend.onnx_import import PRECISION, SUPPORTED, Precision
from vtakit.compiler.ops import keeps_scale
from vtakit.compiler.quant.precision import _int8_form, precision_plan
from vtakit.compiler.quant.recipe import FALLBACK

Tail = tuple[list, list, Callable[[np.ndarray], np.ndarray]]  # ONNX nodes, initializers, numpy meaning


def _tail(op: str) -> Tail:
    """The tail reads "p" (shape (1, 4)) and writes "y"."""
    c = numpy_helper.from_array
    if op == "Identity":
        return [helper.make_node("Identity", ["p"], ["y"])], [], lambda p: p
    if op == "Dropout":
        return [helper.make_node("Dropout", ["p"], ["y"])], [], lambda p: p
    if op == "Flatten":
        return [helper.make_node("Flatten", ["p"], ["y"], axis=0)], [], lambda p: p.reshape(1, -1)
    if op == "Reshape":
        return ([helper.make_node("Reshape", ["p", "s22"], ["y"])], [c(np.array([2, 2], np.int64), "s22")],
                lambda p: p.reshape(2, 2))
    if op == "Transpose":
        return [helper.make_node("Transpose", ["p"], ["y"], perm=[1, 0])], [], lambda p: p.T
    if op == "Squeeze":
        return ([helper.make_node("Squeeze", ["p", "ax0"], ["y"])], [c(np.array([0], np.int64), "ax0")],
                lambda p: p[0])
    if op == "Unsqueeze":
        return ([helper.make_node("Unsqueeze", ["p", "ax02"], ["y"])], [c(np.array([0, 2], np.int64), "ax02")],
                lambda p: np.expand_dims(p, (0, 2)))
    if op == "Concat":  # of float tensors: the output beside itself
        return [helper.make_node("Concat", ["p", "p"], ["y"], axis=0)], [], lambda p: np.concatenate([p, p])
    if op == "Pad":
        return ([helper.make_node("Pad", ["p", "pads"], ["y"])], [c(np.array([0, 1, 0, 2], np.int64), "pads")],
                lambda p: np.pad(p, ((0, 0), (1, 2))))
    if op == "Relu":
        return [helper.make_node("Relu", ["p"], ["y"])], [], lambda p: np.maximum(p, 0)
    if op == "Clip":
        return ([helper.make_node("Clip", ["p", "lo", "hi"], ["y"])],
                [c(np.array(0.1, np.float32), "lo"), c(np.array(0.3, np.float32), "hi")],
                lambda p: np.clip(p, np.float32(0.1), np.float32(0.3)))
    if op == "MaxPool":  # on a 4-D view: max over the two rows of a 2x2 image
        return ([helper.make_node("Reshape", ["p", "s1122"], ["p4"]),
                 helper.make_node("MaxPool", ["p4"], ["y"], kernel_shape=[2, 1])],
                [c(np.array([1, 1, 2, 2], np.int64), "s1122")],
                lambda p: p.reshape(1, 1, 2, 2).max(axis=2, keepdims=True))
    raise AssertionError(op)


NEUTRAL = sorted(op for op, cls in PRECISION.items() if cls is Precision.NEUTRAL)
ACTIVATIONS = ("Relu", "Clip")  # fused into a Gemm they follow: not a tail there


def _model(head: str, tail: str | None):
    """The issue's network; head "softmax" ends in a float op, "gemm" in an int8 one."""
    rng = np.random.default_rng(0)
    c = numpy_helper.from_array
    inits = [c((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             c((rng.standard_normal((8 * 6 * 6, 4)) * 0.1).astype(np.float32), "fc"),
             c(np.array([1, -1], np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "flat"], ["f"], name="reshape"),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], name="gemm")]
    if head == "softmax":
        nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1))
    shape = _tail(tail)[2](np.zeros((1, 4))).shape if tail else (1, 4)
    if tail is None:
        nodes[-1].output[0] = "y"
    else:
        nodes[-1].output[0] = "p"
        tnodes, tinits = _tail(tail)[:2]
        nodes += tnodes
        inits += tinits
    graph = helper.make_graph(nodes, f"issue22_{head}_{tail}", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _inputs():
    rng = np.random.default_rng(1)
    cal = [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    return cal, rng.standard_normal((1, 3, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def untailed() -> dict[str, dict[str, np.ndarray]]:
    """Outputs of the two networks without a tail, by head and device."""
    cal, x = _inputs()
    out = {}
    for head in ("softmax", "gemm"):
        module = vtakit.compile(_model(head, None), "pynq", calibrate=cal, **FALLBACK.options())
        out[head] = {dev: module.run(x, device=dev)["y"] for dev in ("sim", "cpu")}
    return out


CASES = [("softmax", op) for op in NEUTRAL] + [("gemm", op) for op in NEUTRAL if op not in ACTIVATIONS]


@pytest.mark.parametrize("head,tail", CASES, ids=[f"{h}-{t}" for h, t in CASES])
def test_neutral_tail_keeps_the_values_of_the_model_without_it(untailed, head, tail):
    cal, x = _inputs()
    module = vtakit.compile(_model(head, tail), "pynq", calibrate=cal, **FALLBACK.options())  # one recipe for both
    meaning = _tail(tail)[2]
    for dev in ("sim", "cpu"):
        got = module.run(x, device=dev)["y"]
        want = meaning(untailed[head][dev])
        assert got.dtype == np.float32 and got.shape == want.shape, (dev, got.shape, want.shape)
        assert np.array_equal(got, want), (dev, got, want)
    counts = module.graph.op_counts()
    assert counts.get("Quantize") == 1 and counts.get("Dequantize") == 1, counts  # the input's, the Gemm's


def test_issue_probabilities_are_not_on_a_1_128_grid(untailed):
    """The issue's symptom: small probabilities came back as 0, the others as multiples of 1/128."""
    cal, x = _inputs()
    module = vtakit.compile(_model("softmax", "Identity"), "pynq", calibrate=cal)
    y = module.run(x, device="sim")["y"]
    assert np.all(y > 0) and not np.all(y * 128 == np.round(y * 128))
    module.run(x, device="sim")
    (row,) = module.report().outputs
    assert row.precision == "float" and row.source == "softmax (Softmax)"


def test_report_names_a_dequantized_output():
    cal, x = _inputs()
    module = vtakit.compile(_model("gemm", "Identity"), "pynq", calibrate=cal)
    module.run(x, device="sim")
    rep = module.report()
    (row,) = rep.outputs
    assert row.precision == "dequantized int32" and row.source == "gemm (QDense)" and row.step > 0
    assert rep.summary_lines()[-1].startswith("output y (1, 4): dequantized int32 from gemm (QDense), steps of 2^")
    assert rep.to_dict()["outputs"][0]["precision"] == "dequantized int32"


def test_every_supported_op_declares_its_precision():
    assert set(SUPPORTED) - set(PRECISION) == {"Constant"}
    assert {op for op in PRECISION if keeps_scale(op)} == set(NEUTRAL)
    for op in ("Softmax", "AveragePool", "GlobalAveragePool", "Mul"):
        assert PRECISION[op] is Precision.FLOAT
    for op in ("Conv", "Dense", "Add"):
        assert PRECISION[op] is Precision.INT8


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_dropout_import_as_layout_ops(opset):
    c = numpy_helper.from_array
    axes = {"axes": [0, 3]} if opset < 13 else {}
    ins = (lambda name: [name, "ax"]) if opset >= 13 else (lambda name: [name])
    nodes = [helper.make_node("Unsqueeze", ins("x"), ["u"], **axes),
             helper.make_node("Dropout", ["u"], ["d"]),
             helper.make_node("Squeeze", ins("d"), ["y"], **axes)]
    inits = [c(np.array([0, 3], np.int64), "ax")] if opset >= 13 else []
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    assert [n.op for n in g.nodes] == ["Reshape", "Identity", "Reshape"]
    assert g.tensors["u"].shape == (1, 2, 3, 1) and g.tensors["y"].shape == (2, 3)


@pytest.mark.parametrize("name", ["digits_cnn", "small_cnn", "resnet18", "mobilenet_v1"])
def test_int8_ending_zoo_models_keep_the_rule_they_had(name):
    """Before issue 22 every node with an int8 form ran in int8, and a conv/dense kept its int32
    accumulator when no reader ran in int8.  In these models no precision-neutral op sits after a
    float op, so the new rule must give the same plan (hence the same logits and cycles, which
    were also compared directly when the rule changed: resnet18 11,391,795 cycles, digits 3,017,073)."""
    g = optimize(import_onnx(zoo.build(name)))
    old_int8 = {n.name for n in g.nodes if _int8_form(g, n)}
    users = g.consumers()
    old_wide = {n.name for n in g.nodes if n.name in old_int8 and n.op in ("Conv", "Dense") and "act" not in n.attrs
                and not any(u.name in old_int8 for u in users.get(n.outputs[0], []))}
    plan = precision_plan(g)
    assert plan.int8 == old_int8 and plan.wide == old_wide


def test_vtakit_report_prints_each_output_precision(tmp_path, capsys):
    import onnx
    from vtakit.cli import main

    cal, x = _inputs()
    onnx.save(_model("softmax", "Transpose"), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", np.stack(cal))
    np.save(tmp_path / "x.npy", x)
    mod = str(tmp_path / "m.vtamod")
    assert main(["compile", str(tmp_path / "m.onnx"), "--calibrate", str(tmp_path / "cal.npy"), "-o", mod]) == 0
    assert main(["report", mod, "--input", str(tmp_path / "x.npy"), "--plot", str(tmp_path / "r.png")]) == 0
    assert "output y (4, 1): float from softmax (Softmax)" in capsys.readouterr().out


def test_squeeze_and_dropout_errors_name_the_node():
    from vtakit.errors import CompileError

    vi = helper.make_tensor_value_info
    cases = [(helper.make_node("Squeeze", ["x", "ax"], ["y"], name="sq"), "cannot squeeze axes \\[1\\]"),
             (helper.make_node("Dropout", ["x", "", "train"], ["y", "mask"], name="drop"), "training-mode Dropout")]
    for node, msg in cases:
        graph = helper.make_graph([node], "t", [vi("x", TensorProto.FLOAT, [1, 3])], [vi("y", TensorProto.FLOAT, [1, 3])],
                                  [numpy_helper.from_array(np.array([1], np.int64), "ax"),
                                   numpy_helper.from_array(np.array(True), "train")])
        with pytest.raises(CompileError, match=msg) as e:
            import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
        assert e.value.node == node.name and e.value.op == node.op_type


def test_an_op_registered_after_import_keeps_its_precision_class(monkeypatch):
    """The quantizer reads precision classes live: an op a user registers after importing the compiler
    (docs/extending.md) is not silently treated as float-only."""
    from vtakit.compiler.ops import OPS, OpDef
    from vtakit.compiler.ops.registry import same

    late = OpDef("LateNeutral", same, lambda node, args, k: args[0], Precision.NEUTRAL)
    monkeypatch.setitem(OPS, late.name, late)
    assert keeps_scale("LateNeutral") and not keeps_scale("Softmax")
