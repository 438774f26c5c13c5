"""Where a node the accelerator cannot take goes: to the host, in float, with its reason; never an abort."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.module.report import ModuleReport, host_reason_lines

RNG = np.random.default_rng(3)


def _model(nodes, shape, weights, out_shape) -> onnx.ModelProto:
    inits = [numpy_helper.from_array((RNG.standard_normal(s) * 0.1).astype(np.float32), k) for k, s in weights.items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _samples(shape, n=3):
    return [RNG.standard_normal(shape).astype(np.float32) for _ in range(n)]


def test_a_padding_wider_than_the_instruction_field_runs_that_conv_on_the_host():
    """A (1, 39) kernel padded by 19 exceeds LOAD's 4-bit pad field on pynq: the compile goes on, the conv
    runs on the host with the lowering's failure as its reason, and the result is the accelerator-free one."""
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], name="wide", kernel_shape=[1, 39], pads=[0, 19, 0, 19]),
                    helper.make_node("Relu", ["c"], ["y"])], [1, 16, 1, 64], {"w": (16, 16, 1, 39)}, [1, 16, 1, 64])
    module = vtakit.compile(model, "pynq", calibrate=_samples((1, 16, 1, 64)))
    reason = module.notes.host_reasons["wide"]
    assert reason.startswith("the accelerator's lowering failed") and "x_pad 19" in reason
    x = _samples((1, 16, 1, 64), 1)[0]
    assert np.array_equal(module.run(x, device="sim")["y"], module.run(x, device="cpu")["y"])


def _strided_net() -> onnx.ModelProto:
    return _model([helper.make_node("Conv", ["x", "w0"], ["c0"], name="c0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                   helper.make_node("Relu", ["c0"], ["r0"]),
                   helper.make_node("Conv", ["r0", "w1"], ["c1"], name="odd", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                    strides=[2, 1]),
                   helper.make_node("Relu", ["c1"], ["r1"]),
                   helper.make_node("Conv", ["r1", "w2"], ["y"], name="c2", kernel_shape=[1, 1])],
                  [1, 16, 16, 16], {"w0": (16, 16, 3, 3), "w1": (16, 16, 3, 3), "w2": (16, 16, 1, 1)}, [1, 16, 8, 16])


def test_a_conv_the_accelerator_refuses_stays_float_unless_int8_is_asked_for():
    cal = _samples((1, 16, 16, 16))
    module = vtakit.compile(_strided_net(), "pynq", calibrate=cal)
    node = module.graph.node("odd")
    assert node.op == "Conv" and module.graph.tensors[node.inputs[0]].dtype == "float32"
    assert module.notes.host_reasons["odd"] == "kept in float: the host runs it (different strides along H and W)"
    assert {t.node for t in module.vta_tasks()} == {"c0", "c2"}
    assert not any(i.endswith(".bias_corrected") for i in node.inputs)  # no int8 weight error to correct
    asked = vtakit.compile(_strided_net(), "pynq", calibrate=cal, host_int8=True)
    assert asked.graph.node("odd").op == "QConv" and asked.notes.host_reasons["odd"] == "different strides along H and W"
    x = cal[0]
    assert np.array_equal(module.run(x, device="sim")["y"], module.run(x, device="cpu")["y"])


def test_every_host_node_has_its_reason_in_the_report():
    module = vtakit.compile(_strided_net(), "pynq", calibrate=_samples((1, 16, 16, 16)))
    module.run(_samples((1, 16, 16, 16), 1)[0], device="sim")
    rows = ModuleReport.of(module).rows
    assert all(r.reason for r in rows if r.place == "host") and not any(r.reason for r in rows if r.place == "vta")
    lines = host_reason_lines(module.notes.host_reasons)
    assert any(line.startswith("int8 to float at the accelerator's border: ") for line in lines)
    assert "why host" in str(ModuleReport.of(module).table())


def _add_net(shape: list[int], conv_fed: bool) -> onnx.ModelProto:
    """y = f(x) + x on a tensor of `shape`: f a 1x1 conv on the accelerator, or a float Sigmoid on the host."""
    first = (helper.make_node("Conv", ["x", "w"], ["a"], name="f") if conv_fed else
             helper.make_node("Sigmoid", ["x"], ["a"], name="f"))
    return _model([first, helper.make_node("Add", ["a", "x"], ["y"], name="add")], shape,
                  {"w": (shape[1], shape[1], 1, 1)} if conv_fed else {}, shape)


def test_an_add_of_host_operands_stays_float_and_one_fed_by_the_accelerator_runs_there():
    """A 3-D or 5-D add is no "broadcasting add" (the accelerator would take it as runtime.act_nchw says), but
    an add whose operands both come from the host stays float there (three crossings for nothing)."""
    for shape in ([1, 24, 40], [1, 16, 2, 3, 5]):
        module = vtakit.compile(_add_net(shape, conv_fed=False), "pynq", calibrate=_samples(tuple(shape)))
        assert module.graph.node("add").op == "Add" and "its operands come from the host" in module.notes.host_reasons["add"]
    model = _add_net([1, 16, 6, 6], conv_fed=True)
    x = _samples((1, 16, 6, 6), 1)[0]
    module = vtakit.compile(model, "pynq", calibrate=_samples((1, 16, 6, 6)), partition_options=dict(fuse_residual=False))
    assert {t.node for t in module.vta_tasks()} == {"f", "add"}
    assert np.array_equal(module.run(x, device="sim")["y"], module.run(x, device="cpu")["y"])


def test_host_nodes_are_grouped_into_as_few_segments_as_the_dependencies_allow():
    """Two branches, each conv -> sigmoid, listed interleaved: host, accelerator, host, ... becomes one host
    run after the accelerator's (segments.group_segments), and the module computes the same."""
    from vtakit.compiler.passes.segments import count_segments, group_segments
    from vtakit.compiler.ir import Graph, Node, TensorInfo

    t = TensorInfo((1, 16, 4, 4), "float32")
    nodes = [Node("Conv", "c0", ["x", "w"], ["a0"]), Node("Sigmoid", "s0", ["a0"], ["b0"]),
             Node("Conv", "c1", ["x", "w"], ["a1"]), Node("Sigmoid", "s1", ["a1"], ["b1"]),
             Node("Add", "sum", ["b0", "b1"], ["y"])]
    g = Graph(nodes, {k: t for k in ("x", "a0", "b0", "a1", "b1", "y")}, ["x"], ["y"])
    place = {"c0": "vta", "c1": "vta", "s0": "host", "s1": "host", "sum": "host"}
    assert count_segments(g, place) == 2
    group_segments(g, place)
    assert [n.name for n in g.nodes] == ["c0", "c1", "s0", "s1", "sum"] and count_segments(g, place) == 1
