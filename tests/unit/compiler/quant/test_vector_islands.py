"""Squeeze-excite convs (one pooled vector in, float host nodes on both sides) stay float on the host."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.pipeline import optimize
from vtakit.compiler.quant.precision import VECTOR_ISLAND, keep_vector_islands_float

RNG = np.random.default_rng(11)
C, SQ, HW = 16, 4, 8


def _se_net(head: str = "Conv") -> onnx.ModelProto:
    """conv -> [GAP -> conv -> relu -> conv -> sigmoid] * features -> conv (head) -> y."""
    weights = {"w0": (C, C, 3, 3), "wr": (SQ, C, 1, 1), "we": (C, SQ, 1, 1), "w2": (C, C, 1, 1)}
    inits = [numpy_helper.from_array((RNG.standard_normal(s) * 0.3).astype(np.float32), k) for k, s in weights.items()]
    body = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="body", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c0"], ["f"])]
    if head != "Conv":  # the gate of the input itself: nothing int8 before it
        body = [helper.make_node("Relu", ["x"], ["f"])]
    nodes = body + [
             helper.make_node("GlobalAveragePool", ["f"], ["p"], name="pool"),
             helper.make_node("Conv", ["p", "wr"], ["r"], name="reduce", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["r"], ["rr"]),
             helper.make_node("Conv", ["rr", "we"], ["e"], name="expand", kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["e"], ["gate"]),
             helper.make_node("Mul", ["f", "gate"], ["scaled"], name="excite")]
    if head == "Conv":
        nodes.append(helper.make_node("Conv", ["scaled", "w2"], ["y"], name="head", kernel_shape=[1, 1]))
        out = [1, C, HW, HW]
    else:  # the gate itself is the output, read through a float op
        nodes.append(helper.make_node("Identity", ["gate"], ["y"]))
        out = [1, C, 1, 1]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, HW, HW])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _samples(n=3):
    return [RNG.standard_normal((1, C, HW, HW)).astype(np.float32) for _ in range(n)]


def test_the_squeeze_excite_convs_stay_float_on_the_host_and_the_feature_convs_go_to_the_accelerator():
    cal, model = _samples(), _se_net()
    module = vtakit.compile(model, "pynq", calibrate=cal)
    for name in ("reduce", "expand"):
        node = module.graph.node(name)
        assert node.op == "Conv" and module.graph.tensors[node.inputs[0]].dtype == "float32"
        assert module.notes.host_reasons[name] == f"kept in float: {VECTOR_ISLAND}"
        assert not any(i.endswith(".bias_corrected") for i in node.inputs)  # no int8 weight error to offset
    assert {t.node for t in module.vta_tasks()} == {"body", "head"}
    x = _samples(1)[0]
    assert np.array_equal(module.run(x, device="sim")["y"], module.run(x, device="cpu")["y"])
    asked = vtakit.compile(model, "pynq", calibrate=cal, host_int8=True)  # int8 where asked, as before
    assert asked.graph.node("reduce").op == "QConv" and asked.graph.node("expand").op == "QConv"


def test_the_float_gate_is_closer_to_float_than_the_int8_one():
    """The point of the rule: the gate that scales every feature map is computed without rounding (here the
    gate of the input itself, so the kept module is the float one)."""
    cal, tests, model = _samples(), _samples(4), _se_net("gate")
    ref = vtakit.compile(model, "pynq", calibrate=cal, target="cpu")
    kept = vtakit.compile(model, "pynq", calibrate=cal)
    rounded = vtakit.compile(model, "pynq", calibrate=cal, host_int8=True)

    def err(m):
        return max(float(np.abs(m.run(x, device="cpu")["y"] - ref.run(x, device="cpu")["y"]).max()) for x in tests)

    assert err(kept) < 1e-5 and err(rounded) > 1e-3


def test_only_convs_of_a_vector_between_float_host_nodes_are_kept():
    g = optimize(import_onnx(_se_net()))
    marked = keep_vector_islands_float(g)
    kept = {n.name for n in marked.nodes if n.attrs.get("keep_float")}
    assert kept == {"reduce", "expand"}  # not `body` (an image, a graph input) nor `head` (makes the output)
    assert not any(n.attrs.get("keep_float") for n in g.nodes)  # the graph given is not changed
