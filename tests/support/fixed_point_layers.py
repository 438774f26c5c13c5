"""A convolution's operands with per-channel fixed-point factors, for the ALU-MUL requantization tests
on pynq_mul (the simulators in the unit tests, the RTL in the integration tests)."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.quant.techniques.fixed_point import FixedPoint, fixed_point
from vtakit.isa.config import HwConfig

PYNQ_MUL = HwConfig.preset("pynq_mul")


def fixed_point_layer(rng: np.random.Generator, c_in: int, c_out: int, hw: int, extreme: bool = False
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, FixedPoint, np.ndarray]:
    """Operands, and the fixed point of per-channel factors spread over 2**-16..2**-7."""
    if extreme:   # the largest accumulators the bound allows: every product +-128 * 127
        x = np.full((1, c_in, hw, hw), -128, np.int8)
        w = np.where(rng.random((c_out, c_in, 3, 3)) < 0.5, -127, 127).astype(np.int8)
        w[: c_out // 2] = 127
    else:
        x = rng.integers(-128, 128, (1, c_in, hw, hw), dtype=np.int8)
        w = rng.integers(-127, 128, (c_out, c_in, 3, 3), dtype=np.int8)
    b = rng.integers(-20000, 20000, c_out, dtype=np.int32)
    f = np.exp2(rng.uniform(-16, -7, c_out))
    bound = 128 * np.abs(w.astype(np.int64)).reshape(c_out, -1).sum(axis=1) + np.abs(b)
    return x, w, b, fixed_point(f, bound), f
