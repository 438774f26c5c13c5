"""Convolutions with a fused max pool (te.conv2d_def pool=, lowering/pool.py) checked against numpy's conv
followed by numpy's max pool, bit for bit: the cases and checks that the unit tests run on one device
and schedule and the integration tests on the others."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.lowering.pool import halo_rows
from vtakit.compiler.backends.vta.te import PoolWindow
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import CompileError
from vtakit.isa import HwConfig

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


def check_fused_pool(cfg, case, device, rng, schedule=None, per_channel=False, packing=None):
    """Run one case on `device`; assert numpy's bits; return the run's report."""
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


def check_every_case(device: str) -> None:
    """Every case on pynq with the default schedule, per-channel shifts where there are channels to shift."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(18)
    for case in CASES:
        check_fused_pool(cfg, case, device, rng, per_channel=case[0] != 3)


def check_halo_carry(order: str, axis: str, vthreads: int) -> None:
    """Several row tiles per block (odd and even heights, a short last tile): the rows a window needs
    from the tile above come from the carry; threads over rows take alternate tiles."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(5)
    for case in CASES[:6]:
        halo = halo_rows(PoolWindow(*case[7]), case[1], [0])
        for t_oh in sorted({max(2, halo), 3, 4, 5}):
            knobs = ConvKnobs(1, t_oh, case[2], 1, order, axis, vthreads, False)
            try:
                check_fused_pool(cfg, case, "fsim", rng, schedule=knobs)
            except CompileError as e:
                assert "halo rows" in str(e) and t_oh < 4, (case, t_oh, e)
