"""Layout operators as the host backends see them: the dtypes they move and their argument checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.errors import CompileError

LAYOUT_DTYPES = [np.dtype(t) for t in (np.float32, np.int8, np.int32, np.uint8, np.int16, np.int64, np.float64)]


def layout_array(x, name: str, op: str) -> np.ndarray:
    x = checks.array(x, name, op, LAYOUT_DTYPES)
    if not 1 <= x.ndim <= 6:
        raise CompileError(f"{name} has rank {x.ndim}; layout kernels handle 1 to 6", op=op)
    return x


def permutation(perm, ndim: int, op: str) -> tuple[int, ...]:
    """`perm` as a tuple of ints, checked to permute `ndim` axes (shared by the CPU and GPU backends)."""
    try:
        order = tuple(int(p) for p in perm)
    except (TypeError, ValueError):
        raise CompileError(f"perm must be a sequence of axes, got {perm!r}", op=op) from None
    if sorted(order) != list(range(ndim)):
        raise CompileError(f"perm {order} is not a permutation of the {ndim} axes", op=op)
    return order


def fill_value(value, dtype: np.dtype, op: str) -> np.ndarray:
    """`value` as a `dtype` scalar, refusing values the dtype cannot represent."""
    given = np.asarray(value)
    if given.ndim != 0 or given.dtype.kind not in "biuf":
        raise CompileError(f"pad value must be a number, got {value!r}", op=op)
    with np.errstate(all="ignore"):
        fill = given.astype(dtype)
    if not (fill == given or (np.isnan(given) and np.isnan(fill))):
        raise CompileError(f"pad value {value!r} cannot be stored as {dtype.name}", op=op)
    return fill


def concat_axis(arrays: Sequence, axis, op: str) -> int:
    """The concatenation axis in [0, rank) after checking the operands agree off it (shared by the
    CPU and GPU backends; `arrays` need dtype, ndim and shape)."""
    first = arrays[0]
    if not isinstance(axis, (int, np.integer)) or not -first.ndim <= axis < first.ndim:
        raise CompileError(f"axis {axis!r} is out of range for rank {first.ndim}", op=op)
    axis = int(axis) % first.ndim
    for k, a in enumerate(arrays[1:], start=1):
        if a.dtype != first.dtype or a.ndim != first.ndim:
            raise CompileError(f"xs[{k}] is {a.dtype.name} rank {a.ndim}, xs[0] is {first.dtype.name} "
                               f"rank {first.ndim}", op=op)
        if a.shape[:axis] + a.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]:
            raise CompileError(f"xs[{k}] has shape {a.shape}, which differs from {first.shape} off axis {axis}",
                               op=op)
    return axis
