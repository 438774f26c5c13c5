"""Graph passes, each on a small hand-built graph: folding, DCE/CSE, no-ops, fusion, quantization,
partitioning, DRAM planning."""

import numpy as np
import pytest

from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.passes.fold import canonicalize_dense, fold_into_conv, fuse_activations
from vtakit.compiler.passes.fusion import fuse_max_pools, fuse_residual_adds
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.passes.partition import PartitionOptions, partition
from vtakit.compiler.module.dram_plan import plan_dram
from vtakit.compiler.quant.quantize import Calibration, calibrate, ideal_exponent, quantize
from vtakit.compiler.ops.shapes import infer_graph
from vtakit.compiler.passes.simplify import eliminate_common_subexpressions, eliminate_dead_code, fold_constants, remove_noops
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig

RNG = np.random.default_rng(0)
CONV = dict(kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)


def graph(nodes, inputs, consts, outputs):
    g = Graph(nodes, {k: TensorInfo(s, "float32") for k, s in inputs.items()}, list(inputs), outputs, {})
    for k, v in consts.items():
        g.consts[k] = v
        g.tensors[k] = TensorInfo(v.shape, v.dtype.name)
    infer_graph(g)
    g.validate()
    return g


def conv_bn_graph():
    consts = dict(w=RNG.standard_normal((8, 4, 3, 3)).astype(np.float32),
                  b=RNG.standard_normal(8).astype(np.float32),
                  gamma=RNG.uniform(0.5, 1.5, 8).astype(np.float32), beta=RNG.standard_normal(8).astype(np.float32),
                  mean=RNG.standard_normal(8).astype(np.float32), var=RNG.uniform(0.5, 2, 8).astype(np.float32),
                  scale=RNG.uniform(0.5, 2, (1, 8, 1, 1)).astype(np.float32))
    nodes = [Node("Conv", "conv", ["x", "w", "b"], ["c"], dict(CONV)),
             Node("BatchNormalization", "bn", ["c", "gamma", "beta", "mean", "var"], ["n"], dict(epsilon=1e-5)),
             Node("Mul", "mul", ["n", "scale"], ["m"]),
             Node("Relu", "relu", ["m"], ["r"]),
             Node("Clip", "clip", ["r"], ["y"], dict(lo=-1.0, hi=6.0))]
    return graph(nodes, {"x": (2, 4, 6, 6)}, consts, ["y"])


def test_batchnorm_and_scale_fold_into_the_conv_and_activations_fuse():
    g = conv_bn_graph()
    x = RNG.standard_normal((2, 4, 6, 6)).astype(np.float32)
    want = run_graph(g, {"x": x})["y"]
    f = fuse_activations(fold_into_conv(g))
    assert [n.op for n in f.nodes] == ["Conv"] and f.nodes[0].attrs["act"] == (0.0, 6.0)
    assert f.nodes[0].outputs == ["y"]  # the graph output keeps its name
    np.testing.assert_allclose(run_graph(f, {"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_gemm_becomes_dense_with_alpha_beta_folded():
    w = RNG.standard_normal((5, 7)).astype(np.float32)
    c = RNG.standard_normal(5).astype(np.float32)
    g = graph([Node("Gemm", "fc", ["x", "w", "c"], ["y"], dict(alpha=0.5, beta=2.0, transA=False, transB=True))],
              {"x": (3, 7)}, dict(w=w, c=c), ["y"])
    d = canonicalize_dense(g)
    assert d.nodes[0].op == "Dense"
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    np.testing.assert_allclose(run_graph(d, {"x": x})["y"], 0.5 * x @ w.T + 2 * c, rtol=1e-5, atol=1e-5)


def test_constant_folding_dce_cse_and_noops():
    w = RNG.standard_normal((3, 2)).astype(np.float32)
    nodes = [Node("Transpose", "wt", ["w"], ["w_t"], dict(perm=[1, 0])),            # constant: folded
             Node("MatMul", "mm", ["x", "w_t"], ["a"]),
             Node("Relu", "r1", ["a"], ["b1"]), Node("Relu", "r2", ["a"], ["b2"]),  # the same: CSE
             Node("Add", "add", ["b1", "b2"], ["s"]),
             Node("Transpose", "t1", ["s"], ["t"], dict(perm=[1, 0])),
             Node("Transpose", "t2", ["t"], ["u"], dict(perm=[1, 0])),               # cancels t1
             Node("Identity", "id", ["u"], ["v"]),
             Node("Softmax", "unused", ["a"], ["dead"], dict(axis=1, legacy=False)),  # nobody reads it
             Node("Relu", "out", ["v"], ["y"])]
    g = graph(nodes, {"x": (4, 2)}, dict(w=w), ["y"])
    x = RNG.standard_normal((4, 2)).astype(np.float32)
    want = run_graph(g, {"x": x})["y"]
    s = remove_noops(eliminate_common_subexpressions(eliminate_dead_code(fold_constants(g))))
    assert [n.op for n in s.nodes] == ["MatMul", "Relu", "Add", "Relu"]
    np.testing.assert_allclose(run_graph(s, {"x": x})["y"], want, rtol=1e-6)


def test_ideal_exponent():
    assert ideal_exponent(1.0) == 6 and ideal_exponent(127.0) == 0 and ideal_exponent(128.0) == -1
    assert 1.0 * 2 ** ideal_exponent(1.0) <= 127 < 2.0 * 2 ** ideal_exponent(1.0)
    with pytest.raises(CompileError):
        ideal_exponent(float("nan"))


def residual_graph():
    consts = dict(w1=(RNG.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32),
                  w2=(RNG.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32),
                  b1=RNG.standard_normal(16).astype(np.float32) * 0.1)
    nodes = [Node("Conv", "c1", ["x", "w1", "b1"], ["a"], dict(CONV, act=(0.0, float("inf")))),
             Node("MaxPool", "pool", ["a"], ["p"], dict(kernel=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0),
                                                        dilations=(1, 1), ceil_mode=False)),
             Node("Conv", "c2", ["p", "w2"], ["b"], dict(CONV)),
             Node("Add", "add", ["b", "p"], ["s"], dict(act=(0.0, float("inf")))),
             Node("Softmax", "sm", ["s"], ["y"], dict(axis=1, legacy=False))]
    return graph(nodes, {"x": (1, 16, 8, 8)}, consts, ["y"])


def test_max_pool_fuses_into_the_conv_producing_it():
    """graph.fusion: on the accelerator a MaxPool joins the task of the QConv producing its input (its
    only reader); the fused node's output is the pool's, and the host interpreter gives the same bits.
    A pool on the host, or the option off, leaves the pair apart."""
    g = residual_graph()
    q = quantize(g, calibrate(g, [{"x": RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)}]))
    pool = q.node("pool")
    fused = q.copy()
    place = fuse_max_pools(fused, partition(fused, HwConfig.preset("pynq")))
    assert [n.op for n in fused.nodes] == ["Quantize", "QConv", "QConv", "QAdd", "Dequantize", "Softmax"]
    conv = fused.node("c1")
    assert conv.attrs["pool"] == (2, 2, 0) and conv.outputs == pool.outputs and place["c1"] == "vta"
    assert "pool" not in place and fused.tensors[conv.outputs[0]].shape == (1, 16, 4, 4)
    infer_graph(fused)
    assert fused.tensors[conv.outputs[0]].shape == (1, 16, 4, 4)
    for _ in range(2):
        x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
        assert np.array_equal(run_graph(fused, {"x": x})["y"], run_graph(q, {"x": x})["y"])
    kept = q.copy()
    fuse_max_pools(kept, partition(kept, HwConfig.preset("pynq"), PartitionOptions(host_nodes=("pool",))))
    assert [n.op for n in kept.nodes] == [n.op for n in q.nodes]
    # with the config: fused only where a tiling leaves room (a 3x3/2 pool after a conv with rows of 1100
    # columns: two rows of one block already fill pynq's acc buffer), else the pool stays its own task
    assert fuse_max_pools(q.copy(), partition(q, HwConfig.preset("pynq")), HwConfig.preset("pynq"))["c1"] == "vta"
    wide = Graph([Node("QConv", "c", ["x", "w"], ["y"], dict(CONV, shift=6, clip=(0, 127))),
                  Node("MaxPool", "p", ["y"], ["z"], dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                                          dilations=(1, 1), ceil_mode=False))],
                 {"x": TensorInfo((1, 16, 4, 1100), "int8"), "y": TensorInfo((1, 16, 4, 1100), "int8"),
                  "z": TensorInfo((1, 16, 2, 550), "int8")}, ["x"], ["z"], {})
    wide.consts["w"] = np.ones((16, 16, 3, 3), np.int8)
    wide.tensors["w"] = TensorInfo((16, 16, 3, 3), "int8")
    fuse_max_pools(wide, {"c": "vta", "p": "vta"}, HwConfig.preset("pynq"))
    assert [n.op for n in wide.nodes] == ["QConv", "MaxPool"]
    fuse_max_pools(wide, {"c": "vta", "p": "vta"})
    assert [n.op for n in wide.nodes] == ["QConv"] and wide.nodes[0].attrs["pool"] == (3, 2, 1)
    # with its residual add fused first, the conv c2 takes no pool (none follows it); c1 still does
    both = q.copy()
    place = fuse_residual_adds(both, partition(both, HwConfig.preset("pynq")))
    fuse_max_pools(both, place)
    assert [n.op for n in both.nodes] == ["Quantize", "QConv", "QConv", "Dequantize", "Softmax"]


def test_quantize_shares_exponents_and_never_shifts_left():
    g = residual_graph()
    cal = calibrate(g, [{"x": RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)} for _ in range(3)])
    q = quantize(g, cal)
    ops = [n.op for n in q.nodes]
    assert ops == ["Quantize", "QConv", "MaxPool", "QConv", "QAdd", "Dequantize", "Softmax"]
    t = q.tensors
    pool, add = q.nodes[2], q.nodes[4]
    assert t[pool.inputs[0]].exp == t[pool.outputs[0]].exp          # pooling keeps the scale
    assert t[add.inputs[0]].exp == t[add.inputs[1]].exp             # both add inputs share one
    assert all(np.min(n.attrs["shift"]) >= 0 for n in q.nodes if n.op in ("QConv", "QAdd"))  # per channel too
    assert q.nodes[1].attrs["clip"] == (0, 127) and add.attrs["clip"] == (0, 127)
    assert all(t[o].dtype == "int8" for n in q.nodes[1:5] for o in n.outputs)
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    y_float = run_graph(g, {"x": x})["y"]
    y_int8 = run_graph(q, {"x": x})["y"]
    cos = float(y_int8.ravel() @ y_float.ravel() / np.linalg.norm(y_int8) / np.linalg.norm(y_float))
    assert cos > 0.99 and np.abs(y_int8 - y_float).max() < 0.2


def test_quantize_needs_calibration_of_every_tensor():
    with pytest.raises(CompileError, match="calibration saw no values"):
        quantize(residual_graph(), Calibration({"x": 1.0}, 1))


def test_partition_rules_and_options():
    g = residual_graph()
    cal = calibrate(g, [{"x": RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)}])
    q = quantize(g, cal)
    cfg = HwConfig.preset("pynq")
    place = partition(q, cfg)
    # pynq, like VTA's hardware, has no LOAD.ACC8: the int8 max pool and add move their tiles into the
    # accumulator by an identity GEMM; with LOAD.ACC8 they use it; with neither they stay on the host
    assert [place[n.name] for n in q.nodes] == ["host", "vta", "vta", "vta", "vta", "host", "host"]
    place = partition(q, cfg.replace(acc8_load=True))
    assert [place[n.name] for n in q.nodes] == ["host", "vta", "vta", "vta", "vta", "host", "host"]
    odd = cfg.replace(block_in=8, inp_buff_bytes=1 << 14, wgt_buff_bytes=1 << 17)
    place = partition(q, odd)
    assert [place[n.name] for n in q.nodes] == ["host", "vta", "host", "vta", "host", "host", "host"]
    assert "acc8_load is false" in q.notes["host_reasons"]["add"]
    place = partition(q, cfg, PartitionOptions(first_conv="host", host_nodes=("add",)))
    assert place["c1"] == "host" and place["add"] == "host" and place["c2"] == "vta"
    assert q.notes["host_reasons"]["add"] == "asked for the host"
    with pytest.raises(CompileError, match="unknown nodes"):
        partition(q, cfg, PartitionOptions(host_nodes=("nope",)))
    with pytest.raises(CompileError, match="first_conv"):
        PartitionOptions(first_conv="gpu")


def _conv_graph(c: int, hw: int, group: int, c_in_group: int = 1, stride: int = 1):
    """A depthwise (or grouped) conv; at stride 2 a 5x5 one with "same" pads (1, 1, 2, 2)."""
    k = 5 if stride == 2 else 3
    w = RNG.standard_normal((c, c_in_group, k, k)).astype(np.float32)
    attrs = dict(CONV, kernel=(k, k), group=group, strides=(stride, stride),
                 pads=(1, 1, 2, 2) if stride == 2 else CONV["pads"])
    g = graph([Node("Conv", "dw", ["x", "w"], ["y"], attrs)], {"x": (1, c, hw, hw)}, dict(w=w), ["y"])
    return quantize(g, calibrate(g, [{"x": RNG.standard_normal((1, c, hw, hw)).astype(np.float32)}]))


def test_depthwise_conv_placement_weighs_accelerator_and_host():
    """A depthwise conv runs on the accelerator (block-diagonal GEMM) where the cycle model runs it in fewer
    cycles than the host round trip; a tiny one, another grouping, or a config without diagonal blocks
    stays on the host."""
    cfg = HwConfig.preset("pynq")
    q = _conv_graph(96, 56, 96, stride=2)                  # a 5x5 stride-2 "same" block of a mobile network
    assert partition(q, cfg)["dw"] == "vta"
    q = _conv_graph(8, 5, 8)
    assert partition(q, cfg)["dw"] == "host" and "host round trip is cheaper" in q.notes["host_reasons"]["dw"]
    q = _conv_graph(32, 28, 8, c_in_group=4)
    assert partition(q, cfg)["dw"] == "host" and "only depthwise" in q.notes["host_reasons"]["dw"]
    q = _conv_graph(96, 56, 96, stride=2)
    odd = cfg.replace(block_in=8, inp_buff_bytes=1 << 14, wgt_buff_bytes=1 << 17)
    assert partition(q, odd)["dw"] == "host" and "diagonal weight blocks" in q.notes["host_reasons"]["dw"]


def test_dram_plan_reuses_space_only_between_disjoint_lifetimes():
    cfg = HwConfig.preset("pynq")
    acts = {"a": (5000, 0, 1), "b": (3000, 1, 2), "c": (4000, 2, 3), "d": (100, 3, 4)}
    plan = plan_dram(cfg, {"w": 1000}, acts)
    assert plan.slots["w"] == (0, 1000)
    for k1, (s1, f1, l1) in acts.items():
        for k2, (s2, f2, l2) in acts.items():
            if k1 < k2 and not (f1 > l2 or l1 < f2):
                (o1, n1), (o2, n2) = plan.slots[k1], plan.slots[k2]
                assert o1 + n1 <= o2 or o2 + n2 <= o1, (k1, k2)
    used = max(o + n for o, n in plan.slots.values()) - plan.const_bytes
    assert used < plan.activation_bytes_without_reuse
    assert plan.slots["a"][0] % 256 == 0 and plan.arena_bytes % 4096 == 0
    assert all(offset % cfg.burst_bytes == 0 for offset, _ in plan.slots.values())   # no run starts mid-burst


def test_residual_add_fuses_into_the_conv_producing_it():
    """graph.fusion: on the accelerator the QAdd (with its ReLU clip) joins the epilogue of the QConv that
    produces one operand (the only reader of that conv); the host interpreter gives the same bits."""
    g = residual_graph()
    cal = calibrate(g, [{"x": RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)}])
    q = quantize(g, cal)
    add = next(n for n in q.nodes if n.op == "QAdd")
    fused = q.copy()
    place = fuse_residual_adds(fused, partition(fused, HwConfig.preset("pynq")))
    assert [n.op for n in fused.nodes] == ["Quantize", "QConv", "MaxPool", "QConv", "Dequantize", "Softmax"]
    conv = fused.node("c2")
    assert conv.attrs["residual"] == (add.attrs["shift"], add.attrs["clip"]) and conv.attrs["clip"] == (-128, 127)
    assert conv.inputs[3] == add.inputs[1] and conv.outputs == add.outputs and place["c2"] == "vta"
    assert "add" not in place
    for _ in range(2):
        x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
        assert np.array_equal(run_graph(fused, {"x": x})["y"], run_graph(q, {"x": x})["y"])
    # a conv the host runs, or one whose result has another reader, keeps its add
    kept = q.copy()
    fuse_residual_adds(kept, partition(kept, HwConfig.preset("pynq"), PartitionOptions(host_nodes=("c2",))))
    assert [n.op for n in kept.nodes] == [n.op for n in q.nodes]
