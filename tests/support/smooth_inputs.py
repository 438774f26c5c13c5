"""Photo-like synthetic inputs for quantization tests: neighbouring pixels alike, as in real photos,
where a kernel that takes differences of neighbours sees mostly cancelling input (weight_rounding.py)."""

from __future__ import annotations

import numpy as np


def smooth_images(n: int, seed: int, size: int = 24) -> list[np.ndarray]:
    """n images (1, 3, size, size): a per-image brightness plus a 5x5 box-blurred pattern."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.standard_normal((1, 3, size + 4, size + 4)).astype(np.float32)
        for axis in (2, 3):  # a 5-tap box blur along each axis
            x = sum(np.roll(x, k, axis=axis) for k in range(-2, 3)) / 5
        out.append((x[:, :, 2:-2, 2:-2] * 0.5 + rng.uniform(-0.8, 0.8)).astype(np.float32))
    return out
