"""Pooling as the host backends see it: the validated window geometry, the average divisors and
`PoolSpec`, the one description of a pooling kernel that the CPU and the GPU backend both compile."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.errors import CompileError


def window(x: np.ndarray, op: str, kernel, stride, pads, dilation, ceil_mode: bool):
    """Validated (kernel, stride, pads, dilation, out, plane) for a 2-D window on NCHW x."""
    kernel = checks.ints(kernel, 2, "kernel", op, 1)
    stride = checks.ints(stride, 2, "stride", op, 1)
    pads = checks.ints(pads, 4, "pads", op, 0)
    dilation = checks.ints(dilation, 2, "dilation", op, 1)
    if not isinstance(ceil_mode, (bool, np.bool_, int)):
        raise CompileError(f"ceil_mode must be a bool, got {ceil_mode!r}", op=op)
    h, w = x.shape[2:]
    out = tuple(checks.out_size(size, k, s, pads[i], pads[i + 2], d, bool(ceil_mode))
                for i, (size, k, s, d) in enumerate(zip((h, w), kernel, stride, dilation)))
    if min(out) < 1:
        raise CompileError(f"window {kernel} does not fit input {h}x{w} with pads {pads}", op=op)
    plane = tuple(max(size + pads[i] + pads[i + 2], (o - 1) * s + (k - 1) * d + 1)
                  for i, (size, k, s, d, o) in enumerate(zip((h, w), kernel, stride, dilation, out)))
    return kernel, stride, pads, dilation, out, plane


def avg_counts(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, out: int,
                include_pad: bool) -> np.ndarray:
    """Elements counted by each window along one axis (ONNX: the ceil overhang never counts)."""
    start = np.arange(out) * stride - pad_begin
    stop = start + kernel
    if include_pad:
        return np.minimum(stop, size + pad_end) - start
    return np.minimum(stop, size) - np.maximum(start, 0)


@dataclass(frozen=True)
class PoolSpec:
    """One max or average pooling kernel (its cache key in both backends): the window geometry, the
    reduction and the element type."""

    kind: str                          # "max" or "avg"
    integer: bool
    shape: tuple[int, int, int, int]   # N, C, H, W
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int]              # top, left (bottom/right only size the plane)
    dilation: tuple[int, int]
    out: tuple[int, int]
    plane: tuple[int, int]             # rows, columns of a padded scratch plane (the CPU fills one)

    @property
    def copies(self) -> bool:
        """Whether the window reaches past the input, so the CPU kernel reads a filled plane."""
        return self.plane != self.shape[2:]


def max_pool_spec(x, op: str, kernel, stride, pads, dilation, ceil_mode: bool) -> PoolSpec:
    """The validated spec of an ONNX MaxPool on NCHW x (a numpy array or a device operand)."""
    size, step, padding, dilate, out, plane = window(x, op, kernel, stride, pads, dilation, ceil_mode)
    return PoolSpec("max", x.dtype == checks.INT8, tuple(x.shape), size, step, padding[:2], dilate, out, plane)


def avg_pool_spec(x, op: str, kernel, stride, pads, count_include_pad: bool,
                  ceil_mode: bool) -> tuple[PoolSpec, np.ndarray]:
    """The validated spec of an ONNX AveragePool and its divisor per output position: the counts as
    float32, or twice the counts as float64 for int8 (the kernels round half up as floor((2 s + c) / 2c))."""
    size, step, padding, dilate, out, plane = window(x, op, kernel, stride, pads, (1, 1), ceil_mode)
    counts = [avg_counts(x.shape[2 + i], size[i], step[i], padding[i], padding[i + 2], out[i],
                          bool(count_include_pad)) for i in range(2)]
    table = np.outer(counts[0], counts[1])
    if table.min() < 1:
        raise CompileError(f"a window of {size} covers no input element (pads {padding})", op=op)
    integer = x.dtype == checks.INT8
    divisors = np.ascontiguousarray(2.0 * table, dtype=np.float64) if integer else table.astype(np.float32)
    return PoolSpec("avg", integer, tuple(x.shape), size, step, padding[:2], dilate, out, plane), divisors
