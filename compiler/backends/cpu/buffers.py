"""The one place the host kernels allocate their outputs and scratch buffers.

Generated kernels trust their shapes (no bounds checks in the code), so an
indexing bug writes outside a buffer without a word (one did: a tail store
three bytes too wide).  Allocating through here lets tests swap in an
allocator that puts every array between guard bytes (`use_allocator`) and
check the guards after each call.  The switch is process-wide, not per
thread: tests run one kernel call at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

Allocator = Callable[[tuple[int, ...], np.dtype], np.ndarray]
"""(shape, dtype) -> a fresh, writable, C-contiguous array of exactly that shape and dtype."""


def _numpy_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype)


_allocate: Allocator = _numpy_empty


def empty(shape: int | Sequence[int], dtype: Any) -> np.ndarray:
    """A fresh C-contiguous array (contents undefined) from the current allocator."""
    dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    return _allocate(dims, np.dtype(dtype))


def empty_exact(dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """`empty` for callers that already hold a tuple of Python ints and an np.dtype (a kernel plan's output
    shape): no conversions on the per-call path of small kernels."""
    return _allocate(dims, dtype)


def full(shape: int | Sequence[int], fill: Any, dtype: Any) -> np.ndarray:
    """`empty`, every element set to `fill`."""
    out = empty(shape, dtype)
    out[...] = fill
    return out


@contextmanager
def use_allocator(allocate: Allocator) -> Iterator[None]:
    """Inside the block, `empty` and `full` allocate through `allocate` (nesting restores the outer one)."""
    global _allocate
    previous, _allocate = _allocate, allocate
    try:
        yield
    finally:
        _allocate = previous
