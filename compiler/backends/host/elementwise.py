"""Elementwise operators as the host backends see them: their argument checks, the broadcast shape and
that shape collapsed to the fewest axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Checker
from vtakit.errors import CompileError


def collapse(shape: Sequence[int],
             strides: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop unit dimensions and merge neighbours every operand steps through contiguously."""
    dims = [(size, [s[i] for s in strides]) for i, size in enumerate(shape) if size != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, dim_strides in dims:
        if merged:
            outer_size, outer_strides = merged[-1]
            if all(o == s * size for o, s in zip(outer_strides, dim_strides)):
                merged[-1] = (outer_size * size, dim_strides)
                continue
        merged.append((size, dim_strides))
    if not merged:
        merged = [(1, [0] * len(strides))]
    return (tuple(size for size, _ in merged),
            tuple(tuple(dim[1][k] for dim in merged) for k in range(len(strides))))


def broadcast_shape(shapes: Sequence[tuple[int, ...]], op: str) -> tuple[int, ...]:
    """numpy's broadcast of the operands' shapes (Python ints)."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise CompileError(f"shapes {' and '.join(str(s) for s in shapes)} do not broadcast", op=op) from None


def float_pair(a, b, op: str, checked: Checker = checks.array) -> list[Any]:
    """The two float32 operands of add, sub and mul."""
    return [checked(a, "a", op, [checks.FLOAT32]), checked(b, "b", op, [checks.FLOAT32])]


def clip_bounds(dtype: np.dtype, lo, hi, op: str) -> tuple[int, int] | tuple[float, float]:
    """Clip's bounds for x of `dtype`: ints within int8 for int8 x, float32-rounded numbers for float32 x."""
    if dtype == checks.INT8:
        return checks.integer(lo, "lo", op, -128, 127), checks.integer(hi, "hi", op, -128, 127)
    try:
        return float(np.float32(lo)), float(np.float32(hi))
    except (TypeError, ValueError):
        raise CompileError(f"lo and hi must be numbers, got {lo!r} and {hi!r}", op=op) from None


def add_int8_operands(a, b, shift, clip, op: str,
                      checked: Checker = checks.array) -> tuple[Any, Any, tuple[int, int, int]]:
    """(a, b, (shift, low, high)) for the int8 residual add."""
    a = checked(a, "a", op, [checks.INT8])
    b = checked(b, "b", op, [checks.INT8])
    amount = checks.integer(shift, "shift", op, 0, 31)
    low, high = checks.int8_range(clip, op)
    return a, b, (amount, low, high)


def exponent(exp, op: str) -> int:
    """The power-of-two scale of quantize / dequantize (float32's normal range)."""
    return checks.integer(exp, "exp", op, -126, 126)


def batch_norm_channels(x, scale, bias, mean, var, eps, op: str) -> list[np.ndarray]:
    """(mean, factor, bias) shaped (C, 1, 1) for inference batch norm on NCHW x (already checked):
    y = (x - mean) * factor + bias with factor = scale / sqrt(var + eps)."""
    channels = x.shape[1]
    vectors = {}
    for name, value in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        vectors[name] = checks.array(value, name, op, [checks.FLOAT32], ndim=1)
        if vectors[name].shape[0] != channels:
            raise CompileError(f"{name} has {vectors[name].shape[0]} entries for {channels} channels", op=op)
    if not isinstance(eps, (float, int, np.floating)) or eps < 0:
        raise CompileError(f"eps must be a non-negative number, got {eps!r}", op=op)
    factor = (vectors["scale"] / np.sqrt(vectors["var"] + np.float32(eps))).astype(np.float32)
    return [v.reshape(channels, 1, 1) for v in (vectors["mean"], factor, vectors["bias"])]
