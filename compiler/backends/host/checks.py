"""Argument validation shared by the kernel families: one-line `CompileError`s.

Kernels trust their shapes completely (no bounds checks in generated code), so
everything a caller can get wrong is caught here, before anything is compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from vtakit.errors import CompileError
from vtakit.isa.arith import ceil_div

FLOAT32 = np.dtype(np.float32)
INT8 = np.dtype(np.int8)
INT32 = np.dtype(np.int32)

# How a backend checks one operand, called as `array(value, name, op, dtypes, ndim)`: `array` below for
# numpy, `cuda.device_array.operand` where GPU DeviceArrays are accepted too.
Checker: TypeAlias = Callable[..., Any]


def array(value: Any, name: str, op: str, dtypes: Iterable[np.dtype], ndim: int | None = None) -> np.ndarray:
    """`value` as a C-contiguous ndarray of one of `dtypes` (never a copy that aliases)."""
    if not isinstance(value, np.ndarray):
        raise CompileError(f"{name} must be a numpy array, got {type(value).__name__}", op=op)
    check_dtype_shape(value, name, op, dtypes, ndim)
    return value if value.flags.c_contiguous else np.ascontiguousarray(value)  # which makes 0-D arrays 1-D


def check_dtype_shape(value: Any, name: str, op: str, dtypes: Iterable[np.dtype], ndim: int | None = None) -> None:
    """dtype among `dtypes`, rank `ndim` (if given), not empty: for numpy arrays and GPU DeviceArrays alike."""
    allowed = [np.dtype(d) for d in dtypes]
    if value.dtype not in allowed:
        names = " or ".join(d.name for d in allowed)
        raise CompileError(f"{name} has dtype {value.dtype.name}, expected {names}", op=op)
    if ndim is not None and value.ndim != ndim:
        raise CompileError(f"{name} must be {ndim}-D, got shape {value.shape}", op=op)
    if value.size == 0:
        raise CompileError(f"{name} is empty (shape {value.shape})", op=op)


def ints(value: Any, count: int, name: str, op: str, minimum: int) -> tuple[int, ...]:
    """A tuple of `count` Python ints, each >= minimum (an int alone repeats)."""
    if isinstance(value, (int, np.integer)):
        value = (int(value),) * count
    try:
        items = tuple(value)
    except TypeError:
        raise CompileError(f"{name} must be {count} integers, got {value!r}", op=op) from None
    if len(items) != count or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
        raise CompileError(f"{name} must be {count} integers, got {value!r}", op=op)
    if any(v < minimum for v in items):
        raise CompileError(f"{name} must be >= {minimum}, got {tuple(int(v) for v in items)}", op=op)
    return tuple(int(v) for v in items)


def frozen(value: Any) -> Any:
    """A hashable stand-in for a user parameter, for plan signatures (lists become tuples)."""
    try:
        hash(value)
        return value
    except TypeError:
        try:
            return tuple(frozen(v) for v in value)
        except TypeError:
            return repr(value)


def integer(value: Any, name: str, op: str, low: int, high: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not low <= value <= high:
        raise CompileError(f"{name} must be an integer in [{low}, {high}], got {value!r}", op=op)
    return int(value)


@dataclass(frozen=True)
class Requant:
    """int32 accumulator -> int8: arithmetic shift right, then clip to [low, high]."""

    shift: int
    low: int
    high: int


def requant(shift: Any, clip: Any, op: str) -> Requant | None:
    """None when both are None (the int32 accumulator is the result)."""
    if shift is None and clip is None:
        return None
    amount = 0 if shift is None else integer(shift, "shift", op, 0, 31)
    low, high = int8_range(clip, op)
    return Requant(amount, low, high)


def int8_range(clip: Any, op: str) -> tuple[int, int]:
    if clip is None:
        return -128, 127
    bounds = ints(clip, 2, "clip", op, -128)
    if bounds[1] > 127 or bounds[0] > bounds[1]:
        raise CompileError(f"clip must be (lo, hi) with -128 <= lo <= hi <= 127, got {bounds}", op=op)
    return bounds


def weighted(x: Any, w: Any, op: str, ndim: int, checked: Checker = array) -> tuple[Any, Any, bool]:
    """(x, w, integer) for a product with weights (conv2d, dense): x float32 or int8, w of x's dtype."""
    x = checked(x, "x", op, [FLOAT32, INT8], ndim=ndim)
    w = checked(w, "w", op, [x.dtype], ndim=ndim)
    return x, w, x.dtype == INT8


def bias_vector(bias: Any, integer: bool, outputs: int, what: str, op: str, checked: Checker = array) -> Any:
    """None, or one int32 (int8 product) or float32 entry per output (`what` names the outputs)."""
    if bias is None:
        return None
    bias = checked(bias, "bias", op, [INT32 if integer else FLOAT32], ndim=1)
    if bias.shape[0] != outputs:
        raise CompileError(f"bias has {bias.shape[0]} entries for {outputs} {what}", op=op)
    return bias


def int8_requant(shift: Any, clip: Any, integer: bool, what: str, op: str) -> Requant | None:
    """`requant`, refused for float products (`what` names them in the error)."""
    result = requant(shift, clip, op)
    if result is not None and not integer:
        raise CompileError(f"shift/clip apply to int8 {what} only", op=op)
    return result


def result_dtype(integer: bool, requant: Requant | None) -> np.dtype:
    """A product's output: float32, the int32 accumulator, or int8 when requantised."""
    return FLOAT32 if not integer else (INT32 if requant is None else INT8)


def reduction_axis(x: Any, axis: Any, op: str) -> int:
    """`axis` of a reduction over x (softmax), in [-rank, rank); x has at least one dimension."""
    if x.ndim == 0:
        raise CompileError("x must have at least one dimension", op=op)
    if not isinstance(axis, (int, np.integer)) or not -x.ndim <= axis < x.ndim:
        raise CompileError(f"axis {axis!r} is out of range for a {x.ndim}-D input", op=op)
    return int(axis)


def out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
             ceil_mode: bool = False) -> int:
    """Output length of a sliding window (ONNX; a ceil window must start inside input or left pad)."""
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    length = ceil_div(span, stride) + 1
    if (length - 1) * stride >= size + pad_begin:
        length -= 1
    return length
