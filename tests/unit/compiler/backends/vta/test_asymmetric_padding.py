"""Convolutions with asymmetric pads (top, left, bottom, right) on the accelerator: the stride-2 "same"
convolutions of mobile networks, unpacked and with each reduction packing, bit-exact against numpy."""

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.packing import ConvGeometry, ReductionPacking, packing
from vtakit.errors import CompileError

RNG = np.random.default_rng(1617)


@pytest.mark.parametrize("device", ["fsim", "sim"])
@pytest.mark.parametrize("c, h, w, o, k, stride, pads, kind", [
    (3, 15, 15, 32, 3, 2, (0, 0, 1, 1), None),               # the cost model's packing (im2col)
    (3, 15, 15, 32, 3, 2, (0, 0, 1, 1), "none"),
    (3, 15, 14, 20, 3, 2, (0, 0, 1, 1), "space_to_depth"),
    (20, 9, 8, 24, 3, 1, (1, 0, 1, 2), "none"),
    (16, 7, 9, 16, 5, 2, (2, 1, 2, 2), "none"),
])
def test_asymmetric_conv_matches_numpy(device, c, h, w, o, k, stride, pads, kind):
    x = RNG.integers(-128, 128, (1, c, h, w), dtype=np.int8)
    wt = RNG.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    b = RNG.integers(-9000, 9000, o, dtype=np.int32)
    y, rep = ops.conv2d(x, wt, stride=stride, padding=pads, bias=b, shift=9, clip=(-100, 127), device=device,
                        packing=kind)
    want = reference.conv2d(x, wt, stride, pads, b, shift=9, clip=(-100, 127))
    assert y.shape == want.shape and np.array_equal(y, want)
    assert len(np.unique(y)) > 8
    if kind is None:
        assert rep.packing.startswith("im2col")


def test_packing_spec_keeps_asymmetric_pads():
    g = ConvGeometry((1, 3, 15, 15), (32, 3, 3, 3), 2, (0, 0, 1, 1))
    p = packing("im2col", g)
    assert g.out_hw == (7, 7) and ReductionPacking.from_spec(p.to_spec()) == p
    sym = packing("im2col", ConvGeometry((1, 3, 15, 15), (32, 3, 3, 3), 2, 1))
    assert sym.to_spec().count(",") == 10 and ReductionPacking.from_spec(sym.to_spec()) == sym
    with pytest.raises(CompileError, match="bad reduction packing spec"):
        ReductionPacking.from_spec("im2col/1,3,15,15,32,3,3,3,2,0,0,0")


def test_bad_padding_is_one_clear_error():
    x = RNG.integers(-128, 128, (1, 16, 6, 6), dtype=np.int8)
    wt = RNG.integers(-128, 128, (16, 16, 3, 3), dtype=np.int8)
    for bad in ((0, 1), (0, 0, -1, 1), 1.5):
        with pytest.raises(CompileError, match="padding >= 0"):
            ops.conv2d(x, wt, padding=bad, device="fsim")
