"""Graph passes do work linear in the graph's size (issue 37, cause 9: a 200,000-node chain did not
compile, `fold` rebuilt its reader lists after every rewrite and CSE walked the graph per merge).

Work is counted, not timed: the Python lines executed (`sys.settrace`) importing and optimizing a
chain of n blocks and of 4n blocks.  Linear passes do about 4 times the work on the longer chain; a
pass that walks the graph once per node does about 16 times."""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.pipeline import optimize
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.module.dram_plan import plan_dram
from vtakit.isa.config import HwConfig

C = 4  # channels
LINEAR = 5.0  # work(4n) / work(n) above this is super-linear (linear: ~4; the passes before issue 37: 6.8)


def block_chain(blocks: int, seed: int = 0) -> onnx.ModelProto:
    """A chain of blocks, each made of what the passes rewrite: a zero Pad into a Conv, the Conv's
    BatchNormalization, per-channel Mul and Add, Relu, an Identity, a same-shape Reshape, a fake
    quantization pair, and Add/Mul by one-element initializers that repeat (as exporters write them)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    shape = const("shape", np.array([1, C, 4, 4], np.int64))
    for i in range(blocks):
        p = f"b{i}."
        x = node("Pad", [x, const(p + "pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], p + "pad")
        w = const(p + "w", (rng.standard_normal((C, C, 3, 3)) / 6).astype(np.float32))
        x = node("Conv", [x, w, const(p + "b", np.zeros(C, np.float32))], p + "conv")
        stats = [const(p + k, rng.uniform(0.5, 1.5, C).astype(np.float32)) for k in ("gamma", "beta", "mean", "var")]
        x = node("BatchNormalization", [x, *stats], p + "bn")
        x = node("Mul", [x, const(p + "scale", rng.uniform(0.5, 1.5, (1, C, 1, 1)).astype(np.float32))], p + "mul")
        x = node("Add", [x, const(p + "shift", rng.uniform(-1, 1, (1, C, 1, 1)).astype(np.float32))], p + "add")
        x = node("Relu", [x], p + "relu")
        x = node("Identity", [x], p + "id")
        x = node("Reshape", [x, shape], p + "reshape")
        s, z = const(p + "qs", np.float32(0.05)), const(p + "qz", np.int8(0))
        x = node("DequantizeLinear", [node("QuantizeLinear", [x, s, z], p + "q"), s, z], p + "dq")
        x = node("Add", [x, const(p + "c", np.array([rng.integers(0, 3) / 4], np.float32))], p + "addc")
        x = node("Mul", [x, const(p + "k", np.array([1 + rng.integers(0, 3) / 8], np.float32))], p + "mulk")
    graph = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 4, 4])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, C, 4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def work(fn, *args):
    """(fn's result, Python lines executed in it): a measure of work that does not depend on the
    machine's speed or load."""
    lines = 0

    def trace(frame, event, arg):
        nonlocal lines
        lines += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        result = fn(*args)
    finally:
        sys.settrace(previous)
    return result, lines


def test_the_chain_exercises_every_rewrite():
    g = optimize(import_onnx(block_chain(3)))
    # per block: pad, batch norm, scale, shift and relu folded into the conv; no-ops, fake quantization
    # and duplicated constants gone; the two scalar ops stay
    assert g.op_counts() == {"Conv": 3, "Add": 3, "Mul": 3}
    conv = g.nodes[0]
    assert conv.attrs["pads"] == (1, 1, 1, 1) and conv.attrs["act"] == (0.0, float("inf"))
    assert len({n.inputs[1] for n in g.nodes if n.op == "Add"}) <= 3


def test_import_and_graph_passes_are_linear_in_the_graph_size():
    small, big = block_chain(30), block_chain(120)
    g_small, w_small = work(lambda m: optimize(import_onnx(m)), small)
    g_big, w_big = work(lambda m: optimize(import_onnx(m)), big)
    assert len(g_big.nodes) == 4 * len(g_small.nodes)
    assert w_big / w_small < LINEAR, f"{w_small} lines for 30 blocks, {w_big} for 120: super-linear"


def test_a_long_chain_folds_into_its_convs_with_fresh_names():
    """Hundreds of folds into convolutions, each adding constants under new names (`fresh_name`)."""
    g = optimize(import_onnx(block_chain(100)))
    assert g.op_counts()["Conv"] == 100 and len(g.nodes) == 300
    g.validate()
    assert len({n.name for n in g.nodes}) == len(g.nodes)


def chain_lifetimes(n: int) -> dict[str, tuple[int, int, int]]:
    """The activations of an n-task chain: each written by one task and read by the next, a few alive
    throughout (inputs, outputs, a long skip)."""
    rng = np.random.default_rng(1)
    acts = {f"a{i}": (int(rng.integers(1, 64)) * 256, i, i + 1) for i in range(n)}
    acts.update({f"long{k}": (4096 * (k + 1), 0, n) for k in range(3)})
    return acts


def test_dram_plan_is_linear_in_the_number_of_buffers():
    cfg = HwConfig()
    (plan_small, w_small), (plan_big, w_big) = (work(plan_dram, cfg, {"w": 1000}, chain_lifetimes(n))
                                                for n in (500, 2000))
    assert w_big / w_small < LINEAR, f"{w_small} lines for 500 buffers, {w_big} for 2000: super-linear"
    for plan, n in ((plan_small, 500), (plan_big, 2000)):  # buffers alive at the same time never share bytes
        acts = chain_lifetimes(n)
        slots = sorted((plan.slots[k][0], plan.slots[k][0] + size, first, last)
                       for k, (size, first, last) in acts.items())
        for i, (o1, e1, f1, l1) in enumerate(slots):
            for o2, e2, f2, l2 in slots[i + 1:i + 40]:
                assert e1 <= o2 or f1 > l2 or l1 < f2


def test_fresh_names_follow_every_edit_of_the_node_list():
    g = Graph([Node("Relu", "a", ["x"], ["y"])], {"x": TensorInfo((1,), "float32"), "y": TensorInfo((1,), "float32")},
              ["x"], ["y"])
    assert g.fresh_name("a") == "a_1" and g.fresh_name("b") == "b"
    g.nodes.append(Node("Relu", "b", ["y"], ["z"]))
    assert g.fresh_name("b") == "b_1"
    g.nodes.pop()
    assert g.fresh_name("b") == "b"
    g.nodes[0] = Node("Relu", "c", ["x"], ["y"])
    assert g.fresh_name("a") == "a" and g.fresh_name("c") == "c_1"
    g.nodes.insert(0, Node("Relu", "a", ["w"], ["x"]))
    g.nodes.remove(g.nodes[1])
    assert (g.fresh_name("a"), g.fresh_name("c")) == ("a_1", "c")
    g.nodes = [Node("Relu", "d", ["x"], ["y"])]
    assert (g.fresh_name("a"), g.fresh_name("d"), g.fresh_name("y")) == ("a", "d_1", "y_1")
    copied = g.copy()
    copied.nodes.append(Node("Relu", "e", ["y"], ["z"]))
    assert g.fresh_name("e") == "e" and copied.fresh_name("e") == "e_1"


def reversed_chain(n: int) -> Graph:
    f32 = TensorInfo((1,), "float32")
    nodes = [Node("Relu", f"r{i}", [f"t{i}"], [f"t{i + 1}"]) for i in reversed(range(n))]
    return Graph(nodes, {f"t{i}": f32 for i in range(n + 1)}, ["t0"], [f"t{n}"])


def test_toposort_is_linear_and_keeps_an_ordered_graph_as_it_is():
    """A chain listed backwards needed one sweep of the whole list per node."""
    graphs = [reversed_chain(n) for n in (300, 1200)]
    (_, w_small), (_, w_big) = (work(g.toposort) for g in graphs)
    assert w_big / w_small < LINEAR, f"{w_small} lines for 300 nodes, {w_big} for 1200: super-linear"
    assert [n.name for n in graphs[1].nodes] == [f"r{i}" for i in range(1200)]
    before = list(graphs[1].nodes)
    graphs[1].toposort()
    assert graphs[1].nodes == before


def first_fit(cfg: HwConfig, acts: dict[str, tuple[int, int, int]]) -> dict[str, int]:
    """The plan's placement as it was written first: each buffer checked against every one placed."""
    from vtakit.compiler.module.dram_plan import alignment
    from vtakit.isa.arith import round_up

    a, placed, where = alignment(cfg), [], {}
    for key, (size, first, last) in sorted(acts.items(), key=lambda kv: (-kv[1][0], kv[0])):
        offset = 0
        for o, s, f, l in sorted(placed):
            if f > last or l < first:
                continue
            if offset + size <= o:
                break
            offset = max(offset, round_up(o + s, a))
        placed.append((offset, size, first, last))
        where[key] = offset
    return where


def test_dram_plan_places_every_buffer_where_plain_first_fit_does():
    cfg, rng = HwConfig(), np.random.default_rng(2)
    for _ in range(20):
        n = int(rng.integers(1, 400))
        acts = {}
        for i in range(int(rng.integers(1, 120))):
            first = int(rng.integers(0, n))
            last = first + int(rng.integers(0, 3 if rng.random() < 0.8 else n))
            acts[f"a{i}"] = (int(rng.integers(0, 5000)), first, last)
        plan = plan_dram(cfg, {"w": 100}, acts)
        want = first_fit(cfg, acts)
        assert {k: plan.slots[k][0] - plan.const_bytes for k in acts} == want


def test_producer_lookups_follow_the_node_list_and_are_not_pickled():
    import copy
    import pickle

    g = reversed_chain(3)  # r2, r1, r0
    assert g.producer("t1").name == "r0" and g.producer("t0") is None
    g.nodes.append(Node("Relu", "extra", ["t3"], ["t4"]))
    assert g.producer("t4").name == "extra"
    g.nodes.remove(g.nodes[0])
    assert g.producer("t3") is None and g.producer("t2").name == "r1"
    g.nodes = [Node("Relu", "only", ["t0"], ["t1"])]
    assert g.producer("t2") is None and g.producer("t1").name == "only"
    for clone in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g), g.copy()):
        assert clone.nodes == g.nodes and clone.producer("t1").name == "only"
        clone.nodes.append(Node("Relu", "more", ["t1"], ["t2"]))
        assert clone.producer("t2").name == "more" and clone.fresh_name("more") == "more_1"
    assert g.producer("t2") is None and g.fresh_name("more") == "more"


def test_compiling_asks_for_the_producer_map_a_fixed_number_of_times(monkeypatch):
    """Lowering each accelerator conv rebuilt the graph's producer map (a walk per conv)."""
    from vtakit.compiler.pipeline import compile_module

    builds = []
    producers = Graph.producers
    monkeypatch.setattr(Graph, "producers", lambda g: builds.append(len(g.nodes)) or producers(g))
    counts = []
    for blocks in (4, 16):
        builds.clear()
        module = compile_module(block_chain(blocks))
        assert sum(t.op == "QConv" for t in module.tasks if not isinstance(t, str)) == blocks
        counts.append(len(builds))
    assert counts[0] == counts[1], f"producer maps built: {counts[0]} for 4 convs, {counts[1]} for 16"
