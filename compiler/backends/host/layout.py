"""Layout operators as the host backends see them: the dtypes they move and their argument checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Checker
from vtakit.errors import CompileError

LAYOUT_DTYPES = [np.dtype(t) for t in (np.float32, np.int8, np.int32, np.uint8, np.int16, np.int64, np.float64)]


def layout_array(x, name: str, op: str, checked: Checker = checks.array) -> Any:
    """An operand of a layout kernel: one of LAYOUT_DTYPES, rank 1 to 6."""
    x = checked(x, name, op, LAYOUT_DTYPES)
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


@dataclass(frozen=True)
class PadWidths:
    """A checked constant Pad: zeros (or `fill`) before and after each axis, and the padded shape."""

    begins: tuple[int, ...]
    ends: tuple[int, ...]
    shape: tuple[int, ...]
    fill: np.ndarray


def pad_widths(x, pads, value, op: str) -> PadWidths:
    """ONNX Pad's `pads` (all begins, then all ends, each >= 0) and fill value for x (already checked)."""
    widths = checks.ints(pads, 2 * x.ndim, "pads", op, 0)
    begins, ends = widths[:x.ndim], widths[x.ndim:]
    shape = tuple(size + lo + hi for size, lo, hi in zip(x.shape, begins, ends))
    return PadWidths(begins, ends, shape, fill_value(value, x.dtype, op))


def concat_operands(xs, axis, op: str, checked: Checker = checks.array,
                    array_types: tuple[type, ...] = (np.ndarray,)) -> tuple[list[Any], int]:
    """(operands, axis) for concat: a non-empty sequence (not one array of `array_types`) of layout
    operands that agree off `axis`."""
    try:
        items = [] if isinstance(xs, array_types) else list(xs)
    except TypeError:
        items = []
    if not items:
        raise CompileError("xs must be a non-empty sequence of arrays", op=op)
    arrays = [layout_array(x, f"xs[{k}]", op, checked) for k, x in enumerate(items)]
    return arrays, concat_axis(arrays, axis, op)


def pack_operands(x, batch, block, op: str, checked: Checker = checks.array) -> tuple[Any, int, int]:
    """(x, batch, block) for packing NCHW x into the accelerator's blocked layout."""
    x = layout_array(x, "x", op, checked)
    if x.ndim != 4:
        raise CompileError(f"x must be 4-D (N, C, H, W), got shape {x.shape}", op=op)
    return x, checks.integer(batch, "batch", op, 1, 1 << 20), checks.integer(block, "block", op, 1, 1 << 20)


def unpack_operands(y, n, c, op: str, checked: Checker = checks.array) -> tuple[Any, int, int]:
    """(y, n, c) for unpacking the blocked layout back to NCHW; n and c within the blocks' extent."""
    y = layout_array(y, "y", op, checked)
    if y.ndim != 6:
        raise CompileError(f"y must be 6-D (N/b, C/block, H, W, b, block), got shape {y.shape}", op=op)
    nb, cb, _, _, batch, block = y.shape
    return y, checks.integer(n, "n", op, 1, nb * batch), checks.integer(c, "c", op, 1, cb * block)
