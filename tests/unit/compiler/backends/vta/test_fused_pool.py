"""A max pool fused into a convolution's task (te.conv2d_def pool=, lowering/pool.py): the conv's int8
result max-pooled on chip gives numpy's conv followed by numpy's max pool, bit for bit, and only the
pooled tensor is stored.  Hidden sizes (channels not multiples of 16, odd spatial sizes), pools with and
without padding, stride 2 and 1, several row tiles (the halo carried from tile to tile), virtual
threads over rows or channels, per-channel shifts.  The functional simulator, more schedules and the
batch blocks: tests/integration/compiler/backends/vta/test_fused_pool.py."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends.vta.lowering.pool import after_pool, anchor_tap, halo_rows
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.te import AluStep, PoolWindow
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import CompileError
from vtakit.isa import Alu, AluOp, HwConfig, Store

from tests.support.fused_pool_cases import check_every_case, check_fused_pool, check_halo_carry


@pytest.mark.parametrize("device", ["sim"])
def test_fused_pool_matches_conv_then_pool(device: str) -> None:
    check_every_case(device)


@pytest.mark.parametrize("order, axis, vthreads", [("oc", "oh", 2)])
def test_fused_pool_carries_the_halo_across_row_tiles(order: str, axis: str, vthreads: int) -> None:
    check_halo_carry(order, axis, vthreads)


def test_packed_conv1_with_its_pool_stores_only_the_pooled_tensor() -> None:
    """conv1's shape (im2col-packed on the host): the task stores the pooled quarter, and the epilogue's
    shifts and clips run on pooled entries only (they commute with max)."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(1)
    case = (3, 40, 40, 64, 7, 2, 3, (3, 2, 1))
    fused = check_fused_pool(cfg, case, "sim", rng, per_channel=True, packing="im2col")
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
