"""A max pool fused into a convolution's task (te.conv2d_def pool=, lowering/pool.py): the conv's int8
result max-pooled on chip gives numpy's conv followed by numpy's max pool, bit for bit, and only the
pooled tensor is stored.  Hidden sizes (channels not multiples of 16, odd spatial sizes), pools with and
without padding, stride 2 and 1, several row tiles (the halo carried from tile to tile), virtual
threads over rows or channels, per-channel shifts."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.lowering.pool import after_pool, anchor_tap, halo_rows
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.te import AluStep, PoolWindow
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import CompileError
from vtakit.isa import Alu, AluOp, HwConfig, Store

# (c_in, h, w, c_out, kernel, stride, pad, pool (kernel, stride, pad))
CASES = [
    (16, 12, 12, 16, 3, 1, 1, (3, 2, 1)),     # ResNet's pool shape, even sizes
    (20, 13, 11, 40, 3, 1, 1, (3, 2, 1)),     # hidden channels, odd sizes
    (16, 12, 10, 20, 3, 1, 1, (3, 1, 1)),     # stride 1: no anchor column, the compact row scratch
    (3, 9, 9, 24, 3, 1, 0, (2, 2, 0)),        # no padding
    (16, 9, 10, 20, 3, 1, 1, (3, 1, 0)),      # stride 1, no padding
    (8, 11, 11, 16, 3, 1, 1, (5, 2, 2)),      # a wider window: two halo rows
    (3, 29, 29, 20, 7, 2, 3, (3, 2, 1)),      # conv1-like, odd
]


def _check(cfg, case, device, rng, schedule=None, per_channel=False, packing=None):
    c, h, w, o, k, s, p, pool = case
    n = 2 if cfg.batch > 1 else 1
    x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    bias = rng.integers(-6000, 6000, o, dtype=np.int32)
    shift = (np.arange(o) % 5 + 7).astype(np.int64) if per_channel else 9
    y, rep = ops.conv2d(x, wt, stride=s, padding=p, bias=bias, shift=shift, clip=(-100, 127), config=cfg,
                        device=device, pool=pool, schedule=schedule, packing=packing)
    want = reference.max_pool2d(reference.conv2d(x, wt, s, p, bias, shift, (-100, 127)), *pool)
    assert y.shape == want.shape and np.array_equal(y, want), (case, schedule, device)
    return rep


@pytest.mark.parametrize("device", [pytest.param("fsim", marks=pytest.mark.slow), "sim"])
def test_fused_pool_matches_conv_then_pool(device: str) -> None:
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(18)
    for case in CASES:
        _check(cfg, case, device, rng, per_channel=case[0] != 3)


@pytest.mark.parametrize("order, axis, vthreads", [
    ("oc", "oh", 2), pytest.param("sp", "oc", 2, marks=pytest.mark.slow), pytest.param("oc", "oc", 1, marks=pytest.mark.slow)])
def test_fused_pool_carries_the_halo_across_row_tiles(order: str, axis: str, vthreads: int) -> None:
    """Several row tiles per block (odd and even heights, a short last tile): the rows a window needs
    from the tile above come from the carry; threads over rows take alternate tiles."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(5)
    for case in CASES[:6]:
        halo = halo_rows(PoolWindow(*case[7]), case[1], [0])
        for t_oh in sorted({max(2, halo), 3, 4, 5}):
            knobs = ConvKnobs(1, t_oh, case[2], 1, order, axis, vthreads, False)
            try:
                _check(cfg, case, "fsim", rng, schedule=knobs)
            except CompileError as e:
                assert "halo rows" in str(e) and t_oh < 4, (case, t_oh, e)


@pytest.mark.slow
def test_fused_pool_with_batch_blocks_and_the_cycle_model() -> None:
    cfg = HwConfig.preset("1x8")
    rng = np.random.default_rng(9)
    for case in (CASES[1], CASES[2]):
        _check(cfg, case, "sim", rng, schedule=ConvKnobs(1, 4, case[2], 1, "sp", "oh", 2, False))


def test_packed_conv1_with_its_pool_stores_only_the_pooled_tensor() -> None:
    """conv1's shape (im2col-packed on the host): the task stores the pooled quarter, and the epilogue's
    shifts and clips run on pooled entries only (they commute with max)."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(1)
    case = (3, 40, 40, 64, 7, 2, 3, (3, 2, 1))
    fused = _check(cfg, case, "sim", rng, per_channel=True, packing="im2col")
    assert fused.packing.startswith("im2col")
    plain_op, _ = compile_conv2d(cfg, x_shape=(1, 160, 20, 20), w_shape=(64, 160, 1, 1), shift=9, clip=(0, 127))
    assert sum(i.y_size * i.x_size for i in plain_op.insns if isinstance(i, Store)) == 4 * 20 * 20
    op, _ = compile_conv2d(cfg, x_shape=(1, 160, 20, 20), w_shape=(64, 160, 1, 1), shift=9, clip=(0, 127),
                           pool=(3, 2, 1))
    assert sum(i.y_size * i.x_size for i in op.insns if isinstance(i, Store)) == 4 * 10 * 10
    assert op.tensors["out"].shape == (1, 4, 10, 10)
    # the clip (MIN, MAX) runs once per pooled entry, not per conv entry
    clip_uops = sum((i.uop_end - i.uop_bgn) * i.iter_out * i.iter_in for i in op.insns
                    if isinstance(i, Alu) and i.op == AluOp.MIN and i.use_imm and i.imm == 127)
    assert clip_uops == 4 * 10 * 10


def test_monotone_tail_and_anchor() -> None:
    shr, clip_hi, clip_lo = AluStep(AluOp.SHR, imm=9), AluStep(AluOp.MIN, imm=127), AluStep(AluOp.MAX, imm=0)
    add = AluStep(AluOp.ADD, imm=3)
    assert after_pool((add, shr, clip_hi, clip_lo)) == 1
    assert after_pool((shr, add, clip_hi)) == 2
    assert after_pool((add, AluStep(AluOp.MAX, imm=-100))) == 1 and after_pool((AluStep(AluOp.SHR, imm=-2),)) == 1
    assert anchor_tap(PoolWindow(3, 2, 1), 112) == 1          # the window's centre column is its own
    assert anchor_tap(PoolWindow(3, 1, 1), 112) is None       # stride 1: every column is in three windows
    assert anchor_tap(PoolWindow(2, 2, 0), 9) in (0, 1)
    assert halo_rows(PoolWindow(3, 2, 1), 112, list(range(0, 112, 2))) == 1


def test_fused_pool_refuses_what_it_cannot_do() -> None:
    cfg = HwConfig.preset("pynq")
    kw = dict(x_shape=(1, 16, 12, 12), w_shape=(16, 16, 3, 3), padding=1, shift=8, clip=(0, 127), pool=(3, 2, 1))
    with pytest.raises(CompileError, match="whole rows"):
        compile_conv2d(cfg, schedule=ConvKnobs(1, 4, 6, 1), **kw)
    # a tuning log's knobs (a dict, tuned for the plain conv) that split the rows give way to the pool's own
    op, used = compile_conv2d(cfg, schedule=ConvKnobs(1, 4, 6, 1).to_dict(), **kw)
    assert used.tile_ow == 12 and op.tensors["out"].shape == (1, 1, 6, 6)
    with pytest.raises(CompileError, match="int8 result"):
        compile_conv2d(cfg, x_shape=(1, 16, 12, 12), w_shape=(16, 16, 3, 3), padding=1, pool=(3, 2, 1))
    with pytest.raises(CompileError, match="does not fit"):
        compile_conv2d(cfg, x_shape=(1, 16, 4, 4), w_shape=(16, 16, 3, 3), shift=8, pool=(3, 2, 0))
