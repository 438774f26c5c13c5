"""If, Loop and Scan: an If known at compile time (a constant, or an input the user binds) is inlined; the
rest run on the host with bodies of their own.  Each model is a tiny hand-built one, checked against
onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

import vtakit
from vtakit.cli import build_parser
from vtakit.cli.network import _bindings
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.errors import CompileError, VtaError

X = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)


def _vi(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)),
                        opset_imports=[h.make_opsetid("", opset)])


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def sample_rate_model(else_shape=(1, 4), outer="n"):
    """y = If(sr == 16000) then x * 2 + k (k the branch's own initializer) else relu(x) - 1 (or a Slice to
    `else_shape`), plus -x (named `outer`: 't' names a value of the branch too, which onnxruntime refuses
    and ONNX's scoping allows)."""
    then = h.make_graph([h.make_node("Mul", ["x", "two"], ["t"]), h.make_node("Add", ["t", "k"], ["tout"])], "then",
                        [], [_vi("tout", T.FLOAT, [1, 4])], [nh.from_array(np.full((1, 4), 0.5, np.float32), "k")])
    if else_shape == (1, 4):
        other = [h.make_node("Relu", ["x"], ["e"]), h.make_node("Sub", ["e", "one"], ["eout"])]
    else:
        other = [h.make_node("Slice", ["x", "zero", "two_i", "one_i"], ["eout"])]
    els = h.make_graph(other, "else", [], [_vi("eout", T.FLOAT, list(else_shape))])
    nodes = [h.make_node("Equal", ["sr", "c16k"], ["cond"]), h.make_node("Neg", ["x"], [outer]),
             h.make_node("If", ["cond"], ["r"], then_branch=then, else_branch=els),
             h.make_node("Add", ["r", outer], ["y"]) if else_shape == (1, 4) else h.make_node("Identity", ["r"], ["y"])]
    inits = [nh.from_array(np.array(16000, np.int64), "c16k"), nh.from_array(np.array(2.0, np.float32), "two"),
             nh.from_array(np.array(1.0, np.float32), "one"), nh.from_array(np.array([0], np.int64), "zero"),
             nh.from_array(np.array([2], np.int64), "two_i"), nh.from_array(np.array([1], np.int64), "one_i")]
    return _model(nodes, [_vi("x", T.FLOAT, [1, 4]), _vi("sr", T.INT64, [])], [_vi("y", T.FLOAT, None)], inits)


@pytest.mark.parametrize("sr", [16000, 8000])
def test_an_if_on_a_bound_input_is_inlined_and_the_input_leaves_the_module(sr):
    model = sample_rate_model()
    want = _ort(model, {"x": X, "sr": np.array(sr, np.int64)})[0]
    graph = import_onnx(model, values={"sr": sr})
    assert "If" not in graph.op_counts() and graph.inputs == ["x"]
    for target in ("cpu", "vta"):
        module = vtakit.compile(model, target=target, bind={"sr": sr})
        assert list(module.inputs) == ["x"]
        np.testing.assert_allclose(module.run(X)["y"], want, rtol=1e-6)


def test_an_inlined_branch_gets_its_own_names():
    graph = import_onnx(sample_rate_model(outer="t"), values={"sr": 16000})
    assert len({o for n in graph.nodes for o in n.outputs}) == len(graph.nodes)
    from vtakit.compiler.ops.execute import run_graph

    np.testing.assert_allclose(run_graph(graph, {"x": X})["y"], X * 2 + 0.5 - X, rtol=1e-6)


def test_nested_ifs_on_shapes_fold_branch_by_branch():
    """The inner If's condition (the rank of x, through Shape/Size) is known once the outer branch is inlined."""
    inner_then = h.make_graph([h.make_node("Unsqueeze", ["x", "ax"], ["u"]),
                               h.make_node("Squeeze", ["u", "ax"], ["v"])], "it", [], [_vi("v", T.FLOAT, None)])
    inner_else = h.make_graph([h.make_node("Neg", ["x"], ["v"])], "ie", [], [_vi("v", T.FLOAT, None)])
    outer_then = h.make_graph([h.make_node("Shape", ["x"], ["s"]), h.make_node("Size", ["s"], ["rank"]),
                               h.make_node("Equal", ["rank", "two_i"], ["c2"]),
                               h.make_node("If", ["c2"], ["w"], then_branch=inner_then, else_branch=inner_else),
                               h.make_node("Relu", ["w"], ["o"])], "ot", [], [_vi("o", T.FLOAT, None)])
    outer_else = h.make_graph([h.make_node("Identity", ["x"], ["o"])], "oe", [], [_vi("o", T.FLOAT, None)])
    model = _model([h.make_node("If", ["flag"], ["y"], then_branch=outer_then, else_branch=outer_else)],
                   [_vi("x", T.FLOAT, [1, 4]), _vi("flag", T.BOOL, [])], [_vi("y", T.FLOAT, None)],
                   [nh.from_array(np.array([0], np.int64), "ax"), nh.from_array(np.array(2, np.int64), "two_i")])
    graph = import_onnx(model, values={"flag": True})
    assert "If" not in graph.op_counts() and "Neg" not in graph.op_counts()
    module = vtakit.compile(model, target="cpu", bind={"flag": True})
    np.testing.assert_array_equal(module.run(X)["y"], _ort(model, {"x": X, "flag": np.array(True)})[0])


def test_an_if_fed_at_run_time_runs_on_the_host_and_survives_a_save(tmp_path):
    model = sample_rate_model()
    module = vtakit.compile(model, target="cpu")
    assert module.graph.op_counts()["If"] == 1 and set(module.inputs) == {"x", "sr"}
    path = module.save(tmp_path / "if.vtamod")
    loaded = vtakit.compiler.module.compiled.CompiledModule.load(path)
    for sr in (16000, 8000):
        feeds = {"x": X, "sr": np.array(sr, np.int64)}
        want = _ort(model, feeds)[0]
        np.testing.assert_allclose(module.run(feeds)["y"], want, rtol=1e-6)
        np.testing.assert_allclose(loaded.run(feeds)["y"], want, rtol=1e-6)


def test_branches_of_different_shapes_need_the_condition_bound():
    model = sample_rate_model(else_shape=(1, 2))
    with pytest.raises(CompileError, match=r"\(If\).*different shapes.*bind") as e:
        vtakit.compile(model, target="cpu")
    assert "\n" not in str(e.value)
    assert vtakit.compile(model, target="cpu", bind={"sr": 8000}).run(X)["y"].shape == (1, 2)


@pytest.mark.parametrize("value, message", [
    ({"sr": 1.5}, r"bind\['sr'\] = '1.5' is not a value of the input's type int64"),
    ({"sr": True}, "is not a value of the input's type int64"),
    ({"sr": [16000, 8000]}, r"bind\['sr'\] has shape \(2,\); the input is declared \(\)"),
    ({"rate": 16000}, r"bind names unknown inputs \['rate'\]; the model's inputs are \['x', 'sr'\]"),
    ({"sr": "16000"}, "is not a value of the input's type int64"),
    ("sr=16000", "bind takes input names and their values"),
])
def test_a_bad_binding_is_one_error_line(value, message):
    with pytest.raises(CompileError, match=message) as e:
        vtakit.compile(sample_rate_model(), target="cpu", bind=value)
    assert "\n" not in str(e.value)


def test_the_command_line_binds_numbers_and_lists():
    args = build_parser().parse_args(["compile", "m.onnx", "--bind", "sr=16000", "--bind", "g=0.5,1", "--bind",
                                      "on=true"])
    assert _bindings(args.bind) == {"sr": 16000, "g": [0.5, 1], "on": True}
    for bad in ("sr", "sr=", "=3", "sr=fast"):
        with pytest.raises(VtaError, match="--bind takes"):
            _bindings([bad])


# ---------------------------------------------------------------------------------------- Loop, Scan
def loop_model(trips_fed=False, with_scan=True):
    """for i < M: acc = acc * 0.5 + x (+ i); each step's acc also scanned out."""
    body_nodes = [h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Mul", ["acc", "half"], ["a1"]),
                  h.make_node("Add", ["a1", "x"], ["a2"]), h.make_node("Add", ["a2", "fi"], ["acc_out"]),
                  h.make_node("Identity", ["c"], ["c_out"])]
    outs = [_vi("c_out", T.BOOL, []), _vi("acc_out", T.FLOAT, [1, 4])]
    if with_scan:
        body_nodes.append(h.make_node("Identity", ["acc_out"], ["step"]))
        outs.append(_vi("step", T.FLOAT, [1, 4]))
    body = h.make_graph(body_nodes, "body", [_vi("i", T.INT64, []), _vi("c", T.BOOL, []),
                                             _vi("acc", T.FLOAT, [1, 4])], outs)
    inputs = [_vi("x", T.FLOAT, [1, 4])] + ([_vi("M", T.INT64, [])] if trips_fed else [])
    inits = [nh.from_array(np.array(0.5, np.float32), "half"), nh.from_array(np.zeros((1, 4), np.float32), "acc0"),
             nh.from_array(np.array(True), "cond")] + ([] if trips_fed else [nh.from_array(np.array(3, np.int64), "M")])
    outputs = ["final"] + (["steps"] if with_scan else [])
    return _model([h.make_node("Loop", ["M", "cond", "acc0"], outputs, body=body)], inputs,
                  [_vi(o, T.FLOAT, None) for o in outputs], inits)


def test_a_loop_runs_on_the_host_with_its_body_compiled():
    model = loop_model()
    module = vtakit.compile(model, target="cpu")
    want = _ort(model, {"x": X})
    got = module.run(X)
    np.testing.assert_allclose(got["final"], want[0], rtol=1e-6)
    np.testing.assert_allclose(got["steps"], want[1], rtol=1e-6)
    assert got["steps"].shape == (3, 1, 4)


def test_a_loop_whose_trip_count_is_fed_keeps_its_state_but_not_scan_outputs():
    module = vtakit.compile(loop_model(trips_fed=True, with_scan=False), target="cpu")
    for m in (0, 5):
        want = _ort(loop_model(trips_fed=True, with_scan=False), {"x": X, "M": np.array(m, np.int64)})[0]
        np.testing.assert_allclose(module.run({"x": X, "M": np.array(m, np.int64)})["final"], want, rtol=1e-6)
    with pytest.raises(CompileError, match=r"\(Loop\).*scan output 'steps'.*make the trip count a constant"):
        vtakit.compile(loop_model(trips_fed=True), target="cpu")


def test_a_loop_that_could_never_stop_is_refused():
    model = loop_model()
    model.graph.node[0].input[0] = ""
    model.graph.node[0].input[1] = ""
    with pytest.raises(CompileError, match="neither a trip count nor a condition"):
        vtakit.compile(model, target="cpu")


@pytest.mark.parametrize("direction", [0, 1])
def test_a_scan_runs_on_the_host(direction):
    """A running sum over the rows of x (forwards or backwards), its state and every step's sum."""
    body = h.make_graph([h.make_node("Add", ["s", "row"], ["s_out"]), h.make_node("Mul", ["s_out", "row"], ["y"])],
                        "body", [_vi("s", T.FLOAT, [4]), _vi("row", T.FLOAT, [4])],
                        [_vi("s_out", T.FLOAT, [4]), _vi("y", T.FLOAT, [4])])
    node = h.make_node("Scan", ["s0", "xs"], ["total", "ys"], body=body, num_scan_inputs=1,
                       scan_input_directions=[direction], scan_output_axes=[1])
    model = _model([node], [_vi("xs", T.FLOAT, [5, 4])], [_vi("total", T.FLOAT, None), _vi("ys", T.FLOAT, None)],
                   [nh.from_array(np.zeros(4, np.float32), "s0")])
    xs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    want = _ort(model, {"xs": xs})
    got = vtakit.compile(model, target="cpu").run(xs)
    np.testing.assert_allclose(got["total"], want[0], rtol=1e-5)
    np.testing.assert_allclose(got["ys"], want[1], rtol=1e-5)
    assert got["ys"].shape == (4, 5)


def test_unsupported_ops_inside_bodies_are_listed_up_front():
    body = h.make_graph([h.make_node("Gelu2", ["x"], ["o"], domain="custom")], "b", [], [_vi("o", T.FLOAT, None)])
    model = _model([h.make_node("If", ["flag"], ["y"], then_branch=body, else_branch=body)],
                   [_vi("x", T.FLOAT, [1, 4]), _vi("flag", T.BOOL, [])], [_vi("y", T.FLOAT, None)])
    model.opset_import.append(h.make_opsetid("custom", 1))
    with pytest.raises(CompileError, match=r"unsupported ONNX ops: custom\.Gelu2"):
        import_onnx(onnx.ModelProto.FromString(model.SerializeToString()))


def test_a_scan_over_a_vector_passes_0_d_arrays_to_its_body():
    """onnx's own test_scan9_scalar: each step's slice of a 1-D scan input is a 0-d array (np.take gave a
    numpy scalar, which the host kernels refuse)."""
    import os

    from tests.support import node_tests

    folder = next(d for d in node_tests.node_dirs() if os.path.basename(d) == "test_scan9_scalar")
    assert node_tests.run_one(folder) == ("pass", "")
