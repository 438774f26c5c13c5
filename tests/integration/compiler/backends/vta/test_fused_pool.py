"""A max pool fused into a convolution's task on the functional simulator, with the schedules that carry
the halo over threads by channels or by spatial order, and with batch blocks on the cycle model (the
cycle model and the conv's own schedule: tests/unit/compiler/backends/vta/test_fused_pool.py)."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.isa import HwConfig

from tests.support.fused_pool_cases import CASES, check_every_case, check_fused_pool, check_halo_carry

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("device", ["fsim"])
def test_fused_pool_matches_conv_then_pool(device: str) -> None:
    check_every_case(device)


@pytest.mark.parametrize("order, axis, vthreads", [("sp", "oc", 2), ("oc", "oc", 1)])
def test_fused_pool_carries_the_halo_across_row_tiles(order: str, axis: str, vthreads: int) -> None:
    check_halo_carry(order, axis, vthreads)


def test_fused_pool_with_batch_blocks_and_the_cycle_model() -> None:
    cfg = HwConfig.preset("1x8")
    rng = np.random.default_rng(9)
    for case in (CASES[1], CASES[2]):
        check_fused_pool(cfg, case, "sim", rng, schedule=ConvKnobs(1, 4, case[2], 1, "sp", "oh", 2, False))
