"""Per-channel fixed-point requantization on pynq_mul's RTL (the host reference, the functional
simulator and the cycle model: tests/unit/compiler/backends/vta/test_mul_requant.py)."""

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops, reference

from tests.support.fixed_point_layers import PYNQ_MUL, fixed_point_layer


@pytest.mark.slow
def test_conv_with_multipliers_on_the_rtl():
    """The RTL's 32-bit lanewise MUL by a vector operand, against the reference (a pynq_mul Verilator build:
    ~90 s the first time on this machine, hence slow)."""
    x, w, b, fp, _ = fixed_point_layer(np.random.default_rng(1616), 16, 32, 5)
    b = (b + fp.rounding).astype(np.int32)
    args = dict(padding=1, bias=b, shift=fp.shifts, clip=(-128, 127), config=PYNQ_MUL,
                multiplier=fp.multipliers.astype(np.int32), pre_shift=fp.pre_shift)
    y, rep = ops.conv2d(x, w, device="rtl", **args)
    assert np.array_equal(y, reference.conv2d(x, w, 1, 1, b, shift=fp.shifts, clip=(-128, 127),
                                              multiplier=fp.multipliers, pre_shift=fp.pre_shift))
    assert rep.stats.model == "rtl"
    _, sim = ops.conv2d(x, w, device="sim", **args)
    assert abs(sim.cycles - rep.cycles) <= 0.05 * rep.cycles
