"""The bias added by a GEMM (compiler/backends/vta/lowering/bias.py) on pynq's RTL: a 1x1 stride-2 convolution with
hidden sizes (channels not multiples of 16, odd spatial size) and a per-channel shift gives numpy's bits,
and the cycle model's cycles within 2 %."""

import numpy as np

from vtakit.compiler.backends.vta import ops, reference
from vtakit.isa import HwConfig

PYNQ = HwConfig.preset("pynq")


def test_bias_gemm_conv_on_rtl_within_2_percent():
    rng = np.random.default_rng(180)
    x = rng.integers(-128, 128, (1, 40, 15, 15), dtype=np.int8)
    w = rng.integers(-128, 128, (36, 40, 1, 1), dtype=np.int8)
    b = rng.integers(-200000, 200000, 36, dtype=np.int32)
    shift = rng.integers(9, 13, 36)
    want = reference.conv2d(x, w, 2, 0, b, shift=shift, clip=(0, 127))
    cycles = {}
    for device in ("rtl", "sim"):
        y, rep = ops.conv2d(x, w, stride=2, bias=b, shift=shift, clip=(0, 127), config=PYNQ, device=device)
        assert np.array_equal(y, want), device
        cycles[device] = rep.cycles
    assert abs(cycles["rtl"] - cycles["sim"]) <= 0.02 * cycles["rtl"], cycles
