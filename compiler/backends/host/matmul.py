"""MatMul as the host backends see it: where each broadcast batch entry's matrices start."""

from __future__ import annotations

import math

import numpy as np


def batch_offsets(shape: tuple[int, ...], batch_shape: tuple[int, ...], matrix: int) -> np.ndarray:
    """Element offset of each broadcast batch entry's matrix in an operand of batch `shape`."""
    index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape) * matrix
    return np.ascontiguousarray(np.broadcast_to(index, batch_shape)).reshape(-1)
