"""A residual add fused into a convolution's epilogue (te.conv2d_def residual=): the conv's int8 result
plus an int8 tensor, shifted and clipped again, gives numpy's conv followed by numpy's add, bit for bit,
on configurations with LOAD.ACC8 (the operand in an acc slot, ALU ADD) and without it (pynq: the
identity GEMM adds the operand's INP tile into the output tile, lowering/move.py)."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends.vta import reference
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_bias, pack_weight, resolve_device, run_compiled
from vtakit.compiler.backends.vta.runtime import unpack_activation
from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.isa import Alu, AluOp, Gemm, HwConfig, Load, MemId, Store

# (n, c_in, h, w, c_out, kernel, stride, pad): block multiples, odd channel counts and odd sizes
CASES = [(1, 32, 8, 8, 32, 3, 1, 1), (2, 20, 7, 9, 24, 3, 2, 1), (1, 16, 5, 5, 40, 1, 1, 0)]


@pytest.mark.parametrize("preset, device", [("pynq", "fsim"), ("pynq", "sim"), ("2x16", "fsim"), ("1x8", "sim")])
def test_fused_residual_add_matches_conv_then_add(preset: str, device: str) -> None:
    cfg = HwConfig.preset(preset)
    rng = np.random.default_rng(41)
    for n, c, h, w, o, k, s, p in CASES:
        x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
        wt = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
        bias = rng.integers(-4000, 4000, o, dtype=np.int32)
        oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        res = rng.integers(-128, 128, (n, o, oh, ow), dtype=np.int8)
        for add_shift, add_clip in ((0, (-128, 127)), (1, (0, 127))):
            op, _ = compile_conv2d(cfg, x_shape=x.shape, w_shape=wt.shape, stride=s, padding=p, bias=True, shift=8,
                                   clip=(-128, 127), residual=(add_shift, add_clip))
            inputs = {"data": pack_activation(x, cfg.batch, cfg.block_in),
                      "weight": pack_weight(wt, cfg.block_out, cfg.block_in),
                      "bias": pack_bias(bias, cfg.batch, cfg.block_out),
                      "res": pack_activation(res, cfg.batch, cfg.block_out)}
            out, _ = run_compiled(op, resolve_device(device, cfg), inputs)
            conv = reference.conv2d(x, wt, s, p, bias, shift=8, clip=(-128, 127))
            want = reference.add(conv, res, shift=add_shift, clip=add_clip)
            assert np.array_equal(unpack_activation(out, n, o), want), (preset, device, c, o, add_shift)
            moves = [i for i in op.insns if isinstance(i, Load) and i.mem in (MemId.ACC_8BIT, MemId.INP)]
            assert any(i.mem == MemId.ACC_8BIT for i in moves) == cfg.acc8_load  # pynq: no LOAD.ACC8 at all


def test_fused_residual_on_pynq_adds_by_one_gemm_pass() -> None:
    """Without LOAD.ACC8 the residual needs no acc slot, reset or ALU ADD: per output tile one GEMM
    against the identity block (loaded once) where the acc8 configuration loads the tile and runs ALU ADD."""
    pynq = HwConfig.preset("pynq")
    knobs = ConvKnobs(tile_oc=1, tile_oh=2, tile_ow=4, tile_ic=1, vthreads=1)
    kw = dict(x_shape=(1, 16, 4, 4), w_shape=(16, 16, 1, 1), shift=4, clip=(-128, 127), schedule=knobs)
    plain, _ = compile_conv2d(pynq, **kw)
    fused, _ = compile_conv2d(pynq, residual=(0, (0, 127)), **kw)
    acc8, _ = compile_conv2d(pynq.replace(acc8_load=True), residual=(0, (0, 127)), **kw)
    tiles = sum(isinstance(i, Store) for i in plain.insns)
    assert tiles == 2

    def count(program, kind, **fields):
        return sum(isinstance(i, kind) and all(getattr(i, f) == v for f, v in fields.items()) for i in program.insns)

    assert count(fused, Gemm, reset=False) == count(plain, Gemm, reset=False) + tiles
    assert count(fused, Gemm, reset=True) == count(plain, Gemm, reset=True)
    assert count(fused, Alu, op=AluOp.ADD) == 0 and count(acc8, Alu, op=AluOp.ADD) == tiles
    assert count(fused, Load, mem=MemId.INP) == count(plain, Load, mem=MemId.INP) + tiles
    assert count(fused, Load, mem=MemId.WGT) == count(plain, Load, mem=MemId.WGT) + 1
    assert count(fused, Load, mem=MemId.ACC_8BIT) == 0 and count(acc8, Load, mem=MemId.ACC_8BIT) == tiles
    with pytest.raises(CompileError, match="fused residual add needs"):
        compile_conv2d(pynq, x_shape=(1, 16, 4, 4), w_shape=(16, 16, 1, 1), residual=(0, (0, 127)))


def test_idle_clip_of_a_shifted_residual_sum_is_dropped() -> None:
    """int8 + int8 shifted right by one fits int8: the second clip's MIN 127 cannot act and is not
    emitted (one compute cycle less per output entry); with no shift both bounds stay."""
    from vtakit.compiler.backends.vta.te import AluStep, drop_idle_clips

    cfg = HwConfig.preset("pynq")
    kw = dict(x_shape=(1, 16, 4, 4), w_shape=(16, 16, 1, 1), shift=4, clip=(-128, 127))
    shifted, _ = compile_conv2d(cfg, residual=(1, (0, 127)), **kw)
    unshifted, _ = compile_conv2d(cfg, residual=(0, (0, 127)), **kw)
    tail = [(s.op, s.imm) for s in shifted.compute.steps[-2:]]
    assert tail == [(AluOp.SHR, 1), (AluOp.MAX, 0)]
    assert [(s.op, s.imm) for s in unshifted.compute.steps[-2:]] == [(AluOp.MIN, 127), (AluOp.MAX, 0)]
    steps = (AluStep(AluOp.SHR, imm=2), AluStep(AluOp.MIN, imm=63), AluStep(AluOp.MAX, imm=-100))
    assert drop_idle_clips(steps, (-256, 254)) == steps[:1]          # [-64, 63]: both bounds idle
    assert drop_idle_clips(steps, (-256, 255)) == steps[:1]          # 255 >> 2 = 63 still
    assert drop_idle_clips(steps, (-512, 256)) == steps              # [-128, 64]: both act
    vector = AluStep(AluOp.SHR, operand=next(s.operand for s in shifted.compute.steps if s.operand is not None))
    assert drop_idle_clips((vector,) + steps[1:], (0, 1)) == (vector,) + steps[1:]   # unknown amount: kept


def test_first_clip_bound_masked_by_the_sums_clip_is_dropped() -> None:
    """clip(-128, 127), + int8, clip(0, 127): the first clip's MAX -128 cannot change the result (all
    at or below -128 + 127 ends at 0 either way), so it is not emitted, one ALU pass per entry less;
    kept where the unclipped value plus the residual could wrap int32 (no shift after an ALU bias add)."""
    cfg = HwConfig.preset("pynq")
    kw = dict(x_shape=(1, 16, 4, 4), w_shape=(16, 16, 3, 3), padding=1, clip=(-128, 127), residual=(0, (0, 127)))
    ops = [(s.op, s.imm) for s in compile_conv2d(cfg, shift=8, **kw)[0].compute.steps if s.operand is None]
    assert ops == [(AluOp.SHR, 8), (AluOp.MIN, 127), (AluOp.MIN, 127), (AluOp.MAX, 0)]
    kept = compile_conv2d(cfg, shift=0, bias=True, **kw)[0].compute.steps
    assert [(s.op, s.imm) for s in kept if s.operand is None] == [(AluOp.MIN, 127), (AluOp.MAX, -128),
                                                                  (AluOp.MIN, 127), (AluOp.MAX, 0)]
    # without a bias the reduction bounds the value (16 x 9 int8 products): no wrap, dropped even unshifted
    unshifted = compile_conv2d(cfg, shift=0, **kw)[0].compute.steps
    assert (AluOp.MAX, -128) not in [(s.op, s.imm) for s in unshifted]


@pytest.mark.parametrize("clip, residual", [((-128, 127), (0, (0, 127))), ((-128, 127), (1, (-128, 127))),
                                            ((0, 127), (0, (0, 127))), ((-100, 50), (2, (-3, 20))),
                                            ((-128, 127), (0, (-128, 127)))])
def test_dropped_clip_bounds_keep_every_value(clip, residual) -> None:
    """drop_masked_bounds against the full epilogue on every value in reach and every int8 residual."""
    from vtakit.compiler.backends.vta.te import AluStep, drop_idle_clips, drop_masked_bounds, epilogue

    cfg = HwConfig.preset("pynq")
    head = epilogue(cfg, None, 3, clip)
    tail = epilogue(cfg, None, residual[0], residual[1])
    magnitude = 2**31 >> 3
    steps, bounds = drop_masked_bounds(head, tail, magnitude)
    short = drop_idle_clips(tail, bounds)

    def run(seq, x):
        for s in seq:
            x = x >> s.imm if s.op is AluOp.SHR else np.minimum(x, s.imm) if s.op is AluOp.MIN else np.maximum(x, s.imm)
        return x

    v = np.concatenate([np.arange(-5000, 5000), [-magnitude, magnitude - 1]]).astype(np.int64)[:, None]
    r = np.arange(-128, 128, dtype=np.int64)[None, :]
    assert np.array_equal(run(short, run(steps, v) + r), run(tail, run(head, v) + r)), (clip, residual)
    assert all(isinstance(s, AluStep) for s in steps)
