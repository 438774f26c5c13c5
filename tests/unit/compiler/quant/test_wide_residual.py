"""graph/wide_residual.py: a conv whose only reader is a residual add keeps k extra bits (no int8 clip)
and the skip enters times 2**k; the host reference, the functional and the cycle model agree bit for bit,
fused or not, and k stays inside int32 for every input."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.ir import Graph
from vtakit.compiler.ops.epilogues import add_wide, requantize_wide
from vtakit.compiler.quant.techniques.wide_residual import WIDE_ADD_REASON, WIDE_CONV_REASON, WIDE_NOTE, wide_bits, widen
from vtakit.compiler.backends.vta.graph_ops import lower_qconv
from vtakit.compiler.backends.vta.lowering import identity_weight
from vtakit.compiler.backends.vta.te import conv2d_def
from vtakit.compiler.zoo.builder import GraphBuilder
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp

SHAPE = (1, 16, 8, 8)


def residual_net():
    """Two residual blocks: conv-relu-conv + identity skip; a 1x1 'downsample' conv + 3x3 conv."""
    b = GraphBuilder("wide_residual", seed=3, opset=13)
    x = b.input("data", SHAPE)
    a = b.relu(b.conv(x, 32, 3, name="c0", pad=1, bias=True), name="r0")
    h = b.relu(b.conv(a, 32, 3, name="c1", pad=1, bias=True), name="r1")
    h = b.conv(h, 32, 3, name="c2", pad=1, bias=True)
    s = b.relu(b.add(h, a, name="add1"), name="r2")
    d = b.conv(s, 32, 1, name="down", bias=True)
    h = b.conv(s, 32, 3, name="c3", pad=1, bias=True)
    return b.model([b.relu(b.add(d, h, name="add2"), name="r3")])


def samples(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(n)]


def run_all(module, inputs, devices=("fsim", "sim")) -> None:
    for x in inputs:
        ref = module.run(x, device="cpu")
        for device in devices:
            got = module.run(x, device=device)
            assert all(np.array_equal(ref[k], got[k]) for k in ref), device


@pytest.mark.parametrize("preset, bits", [("pynq", 6), ("pynq_mul", 6), ("2x16", 0)])
def test_host_fsim_and_cycle_model_agree(preset: str, bits: int) -> None:
    """Fused pairs: on pynq(_mul) the later conv of each add is wide with k = 6 (the identity GEMM's limit;
    the conv's shifts are larger); with LOAD.ACC8 (2x16) k = 0: today's pair, the conv clipped to int8."""
    module = vtakit.compile(residual_net(), preset, calibrate=samples(3, 0), wide_residual="on")
    fused = {n.name: n for n in module.graph.nodes if "residual" in n.attrs}
    assert sorted(fused) == ["c2", "c3"]
    cfg = HwConfig.preset(preset)
    for n in fused.values():
        assert n.attrs.get("residual_bits", 0) == bits and ("wide" in n.attrs) == (bits > 0)
        assert ("clip" in n.attrs) == (bits == 0)
        # the accelerator's epilogue clips the conv's result before the add exactly where the graph does
        # (the add's ReLU masks the clip's lower bound, not its upper: te.drop_masked_bounds)
        steps = lower_qconv(module.graph, n, cfg, None).op.compute.steps
        before_add = steps[:[s.operand is not None and s.operand.tensor.name == "res" for s in steps].index(True)]
        assert any(s.op is AluOp.MIN for s in before_add) == (bits == 0)
    run_all(module, samples(2, 7))


@pytest.mark.parametrize("options, host", [(dict(fuse_residual=False), {"c2", "add1", "c3", "add2"}),
                                           (dict(host_nodes=("c2",)), {"c2", "add1"}),
                                           (dict(host_nodes=("add2",)), {"c3", "add2"})])
def test_unfused_wide_pairs_run_on_the_host(options: dict, host: set[str]) -> None:
    """A wide conv's int32 result never reaches DRAM from the accelerator: a pair not fused stays on the
    host (its int32 QConv and int32 + int8 QAdd), bit-identical to the accelerator's fused form."""
    module = vtakit.compile(residual_net(), "pynq", calibrate=samples(3, 0), partition_options=options,
                            wide_residual="on", host_int8=True)  # the nodes asked for the host stay int8 there
    on_host = {t for t in module.tasks if isinstance(t, str)}
    assert host <= on_host and not {"c0", "c1", "down"} & on_host
    reasons = module.notes.host_reasons
    assert {reasons[n] for n in host} - {"asked for the host"} <= {WIDE_CONV_REASON, WIDE_ADD_REASON}
    wide = [n for n in module.graph.nodes if n.op == "QConv" and "wide" in n.attrs and "residual" not in n.attrs]
    assert wide and all(module.graph.tensors[n.outputs[0]].dtype == "int32" for n in wide)
    run_all(module, samples(1, 9), devices=("sim",))


def test_module_file_keeps_the_wide_pair(tmp_path) -> None:
    """A saved module (one pair fused, one on the host) loads with the same bits."""
    module = vtakit.compile(residual_net(), "pynq", calibrate=samples(3, 0),
                            partition_options=dict(host_nodes=("add2",)), wide_residual="on", host_int8=True)
    loaded = CompiledModule.load(module.save(tmp_path / "m.vtamod"))
    assert loaded.graph.node("add2").attrs["left"] == module.graph.node("add2").attrs["left"]
    x = samples(1, 5)[0]
    assert all(np.array_equal(a, b) for a, b in zip(loaded.run(x, device="sim").values(),
                                                    module.run(x, device="cpu").values()))


def test_rtl_gives_the_same_bits() -> None:
    """The scaled identity block on the RTL: the fused wide pairs' bits, as on the host."""
    module = vtakit.compile(residual_net(), "pynq", calibrate=samples(3, 0), wide_residual="on")
    run_all(module, samples(1, 11), devices=("rtl",))


def test_off_means_int8_pairs_and_a_bad_mode_is_one_error() -> None:
    """With wide_residual="off" (what the default, auto, keeps unless the outputs favour "on": recipe.py)
    every conv feeding an add is clipped to int8; an unknown mode is one error line naming the option."""
    module = vtakit.compile(residual_net(), "pynq", calibrate=samples(3, 0), wide_residual="off")
    convs = [n for n in module.graph.nodes if n.op == "QConv"]
    assert all("wide" not in n.attrs and "clip" in n.attrs for n in convs)
    assert not any("left" in n.attrs for n in module.graph.nodes)
    with pytest.raises(CompileError, match="unknown wide_residual 'yes'; use one of auto, on, off") as e:
        vtakit.compile(residual_net(), "pynq", calibrate=samples(1, 0), wide_residual="yes")
    assert "\n" not in str(e.value)


def test_report_accuracy_takes_the_option(tmp_path, capsys) -> None:
    """`vtakit report --accuracy --wide-residual on` compares the wide pair's int32 conv outputs."""
    import onnx

    from vtakit.cli import main

    path = tmp_path / "residual.onnx"
    onnx.save(residual_net(), path)
    args = ["report", str(path), "--accuracy"]
    assert main(args + ["--wide-residual", "on"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "│ Conv │" in line]
    assert sorted(r.split("│")[1].strip() for r in rows if "int32" in r) == ["c2", "c3"]
    assert main(args) == 0
    assert "int32" not in capsys.readouterr().out


def _widen(limit: int, w_q: np.ndarray, bias_q: np.ndarray, attrs: dict, add_shift: int = 0):
    g = Graph([], {}, [], [], {}, "g", {WIDE_NOTE: limit})
    return widen(g, w_q, bias_q, attrs, add_shift)


def test_k_is_bounded_by_the_shift_the_config_and_int32() -> None:
    w = np.full((2, 64), 127, np.int8)
    bias = np.zeros(2, np.int64)
    k, _, attrs = _widen(6, w, bias, dict(shift=(2, 9), clip=(-128, 127)))
    assert k == 2 and attrs["shift"] == (0, 7) and "clip" not in attrs and attrs["wide"] == 2
    assert _widen(6, w, bias, dict(shift=9, clip=(-128, 127)))[0] == 6
    assert _widen(0, w, bias, dict(shift=9, clip=(-128, 127)))[0] == 0
    # one channel whose exact bound (128 * sum|w| + |bias|) is 2**31 - 5000: with k = 6 the accumulator
    # (shifted by 0) plus the skip << 6 could wrap int32; k = 5 halves it first
    n = (2 ** 31 - 5000) // (128 * 127)
    big = np.full((1, n), 127, np.int8)
    rest = 2 ** 31 - 5000 - 128 * 127 * n
    k, bias_q, attrs = _widen(6, big, np.full(1, rest, np.int64), dict(shift=6, clip=(-128, 127)))
    assert k == 5 and attrs["shift"] == 1 and int(bias_q[0]) == rest + 1  # half a step of the wider grid
    assert ((2 ** 31 - 5000) >> 1) + 1 + (128 << k) < 2 ** 31 and 2 ** 31 - 5000 + (128 << 6) >= 2 ** 31
    # a multiplier epilogue: k <= min n[c], the product's bound after >> (n - k)
    k, bias_q, attrs = _widen(6, w, bias, dict(pre_shift=0, multiplier=(300, 500), shift=(4, 5), clip=(0, 127)))
    assert k == 4 and attrs["shift"] == (0, 1) and not np.any(bias_q) and attrs["multiplier"] == (300, 500)
    # a product the pre-shift did not keep small enough for k = 4 ((128 * 64 * 127 + 1) * 5000 >> 1 > 2**31): k = 3
    assert _widen(6, w, bias, dict(pre_shift=0, multiplier=(300, 5000), shift=(4, 5), clip=(0, 127)))[0] == 3


def test_the_wide_pair_rounds_to_nearest() -> None:
    """out = (((acc + bias') >> (s1 - k)) + (skip << k)) >> (s2 + k) with the rounding widen puts in bias'
    is the exact (acc / 2**s1 + skip) / 2**s2 rounded to nearest (within the wide grid's own rounding),
    where the int8 pair's QAdd rounds down; the same with per-channel shifts."""
    rng = np.random.default_rng(4)
    w = np.ones((2, 1), np.int8)
    half8 = np.array([2 ** 8, 2 ** 9], np.int64)  # the int8 conv's own rounding (quantize._linear_requant)
    k, bias_q, attrs = _widen(6, w, half8, dict(shift=(9, 10), clip=(-128, 127)), add_shift=2)
    assert k == 6 and attrs["shift"] == (3, 4)
    # 2**(s1 + s2 - 1) for the final shift, 2**(s1 - k - 1) for the wide grid
    assert list(bias_q) == [2 ** 10 + 2 ** 2, 2 ** 11 + 2 ** 3]
    acc = rng.integers(-2 ** 16, 2 ** 16, (1, 2, 4000)).astype(np.int32)
    skip = rng.integers(-128, 128, (1, 2, 4000)).astype(np.int8)
    y = requantize_wide(acc + bias_q.reshape(1, 2, 1).astype(np.int32), attrs)
    out = add_wide(y, skip, (0, k), 2 + k, (-128, 127)).astype(np.float64)
    exact = (acc / 2.0 ** np.array([9, 10]).reshape(1, 2, 1) + skip) / 4
    assert np.abs(out - exact).max() <= 0.5 + 2 ** -8 and abs(float(np.mean(out - exact))) < 0.02


def test_config_limit_and_identity_block() -> None:
    assert wide_bits(HwConfig.preset("pynq")) == 6 and wide_bits(HwConfig.preset("2x16")) == 0
    cfg = HwConfig.preset("pynq")
    block = identity_weight(cfg, 6)[0]
    assert block.dtype == np.int8 and np.array_equal(block, 64 * np.eye(cfg.block_out, cfg.block_in))
    with pytest.raises(CompileError, match="identity GEMM") as e:
        conv2d_def(HwConfig.preset("2x16"), n=1, c_in=16, h=4, w=4, c_out=16, kh=1, kw=1, shift=3,
                   residual=(0, (-128, 127), 2), name="c")
    assert "\n" not in str(e.value) and "2x16" in str(e.value)
