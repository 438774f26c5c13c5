"""The bias added by a GEMM (lowering/bias.py): the `ones` INP entry times per-channel digit blocks in WGT
gives numpy's convolution bit for bit, with the ALU ADD path's bits, in one compute cycle per output entry
where the ALU ADD of an acc vector takes two; biases too large for the lanes keep the ALU ADD."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.lowering import bias_fits, pack_bias_weight
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_bias, pack_weight, resolve_device, run_compiled
from vtakit.compiler.backends.vta.runtime import unpack_activation
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import CompileError
from vtakit.isa import Alu, AluOp, Gemm, HwConfig, Load, MemId, Store

# (n, c_in, h, w, c_out, kernel, stride, pad): block multiples, channels not multiple of 16, odd sizes
CASES = [(1, 32, 8, 8, 32, 1, 2, 0), (2, 20, 7, 9, 24, 3, 2, 1), (1, 16, 5, 5, 40, 1, 1, 0), (1, 70, 11, 11, 36, 1, 2, 0)]


def _run(cfg: HwConfig, device: str, x, wt, bias, s, p, bias_gemm: bool, residual=None, res=None):
    op, _ = compile_conv2d(cfg, x_shape=x.shape, w_shape=wt.shape, stride=s, padding=p, bias=True, shift=8,
                           clip=(0, 127), bias_gemm=bias_gemm, residual=residual)
    inputs = {"data": pack_activation(x, cfg.batch, cfg.block_in),
              "weight": pack_weight(wt, cfg.block_out, cfg.block_in),
              "bias": pack_bias_weight(bias, cfg) if bias_gemm else pack_bias(bias, cfg.batch, cfg.block_out)}
    if res is not None:
        inputs["res"] = pack_activation(res, cfg.batch, cfg.block_out)
    out, stats = run_compiled(op, resolve_device(device, cfg), inputs)
    return op, unpack_activation(out, x.shape[0], wt.shape[0]), stats


@pytest.mark.parametrize("preset, device", [("pynq", "fsim"), ("pynq", "sim"), ("2x16", "fsim"), ("1x8", "sim")])
def test_bias_gemm_matches_numpy_and_the_alu_add(preset: str, device: str) -> None:
    cfg = HwConfig.preset(preset)
    rng = np.random.default_rng(18)
    limit = 63 + 127 * 127 * (cfg.block_in - 1)
    for n, c, h, w, o, k, s, p in CASES:
        x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
        wt = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
        bias = rng.integers(-limit, limit + 1, o, dtype=np.int32)
        bias[:2] = (limit, -limit)                                   # the extremes the lanes hold
        assert bias_fits(cfg, bias)
        want = reference.conv2d(x, wt, s, p, bias, shift=8, clip=(0, 127))
        op, got, _ = _run(cfg, device, x, wt, bias, s, p, True)
        _, alu, _ = _run(cfg, device, x, wt, bias, s, p, False)
        assert np.array_equal(got, want) and np.array_equal(alu, want), (preset, device, c, o)
        assert not any(isinstance(i, Alu) and not i.use_imm for i in op.insns)      # no ALU reads a vector
        assert not any(isinstance(i, Load) and i.mem == MemId.ACC for i in op.insns)  # nor loads one


def test_bias_gemm_with_a_fused_residual_on_pynq() -> None:
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 24, 9, 9), dtype=np.int8)
    wt = rng.integers(-128, 128, (40, 24, 1, 1), dtype=np.int8)
    bias = rng.integers(-100000, 100000, 40, dtype=np.int32)
    res = rng.integers(-128, 128, (1, 40, 5, 5), dtype=np.int8)
    _, got, _ = _run(cfg, "sim", x, wt, bias, 2, 0, True, residual=(1, (0, 127)), res=res)
    want = reference.add(reference.conv2d(x, wt, 2, 0, bias, shift=8, clip=(0, 127)), res, shift=1, clip=(0, 127))
    assert np.array_equal(got, want)


def test_bias_gemm_costs_one_cycle_per_entry_less() -> None:
    """Same schedule, same bits: per output entry one GEMM micro-op replaces a two-read ALU ADD, so the
    compute module's busy cycles drop by one per entry, less the GEMM's deeper drain once per tile."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 64, 16, 16), dtype=np.int8)
    wt = rng.integers(-128, 128, (64, 64, 1, 1), dtype=np.int8)
    bias = rng.integers(-4096, 4096, 64, dtype=np.int32)
    knobs = ConvKnobs(tile_oc=4, tile_oh=4, tile_ow=8, tile_ic=4, vthreads=2)
    runs = {}
    for gemm in (True, False):
        op, _ = compile_conv2d(cfg, x_shape=x.shape, w_shape=wt.shape, stride=2, bias=True, shift=8, clip=(0, 127),
                               bias_gemm=gemm, schedule=knobs)
        inputs = {"data": pack_activation(x, 1, 16), "weight": pack_weight(wt, 16, 16),
                  "bias": pack_bias_weight(bias, cfg) if gemm else pack_bias(bias, 1, 16)}
        out, stats = run_compiled(op, resolve_device("sim", cfg), inputs)
        runs[gemm] = (unpack_activation(out, 1, 64), stats, op)
    entries = 4 * 8 * 8                                           # ocb x output rows x output columns
    assert np.array_equal(runs[True][0], runs[False][0])
    assert runs[True][1].gemm_uops - runs[False][1].gemm_uops == entries
    assert runs[False][1].alu_uops - runs[True][1].alu_uops == entries
    busy = {g: runs[g][1].modules["compute"].busy for g in runs}
    adds = [i for i in runs[True][2].insns if isinstance(i, Gemm) and not i.reset]
    tiles = sum(isinstance(i, Store) for i in runs[True][2].insns)
    # one instruction per tile either way; a GEMM drains its deeper pipeline (HwConfig) before the next
    assert busy[False] - busy[True] >= entries - tiles * (cfg.gemm_pipeline - cfg.alu_pipeline)
    assert len(adds) == 2 * tiles                                 # per output tile: the conv's GEMM, the bias's
    assert not any(isinstance(i, Alu) and i.op == AluOp.ADD for i in runs[True][2].insns)


def test_large_bias_keeps_the_alu_add() -> None:
    """A bias beyond the lanes' reach (here 2^30) is added by the ALU, bit-exact; packing it for the GEMM
    is refused with one line naming the limit."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (1, 16, 6, 6), dtype=np.int8)
    wt = rng.integers(-128, 128, (16, 16, 1, 1), dtype=np.int8)
    bias = rng.integers(-4096, 4096, 16, dtype=np.int32)
    bias[3] = 1 << 30
    assert not bias_fits(cfg, bias)
    y, rep = ops.conv2d(x, wt, stride=2, bias=bias, shift=8, clip=(0, 127), config=cfg, device="sim")
    assert np.array_equal(y, reference.conv2d(x, wt, 2, 0, bias, shift=8, clip=(0, 127)))
    with pytest.raises(CompileError, match="do not fit 16 GEMM lanes"):
        pack_bias_weight(bias, cfg)
