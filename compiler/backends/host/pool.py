"""Pooling as the host backends see it: the validated window geometry and the average divisors."""

from __future__ import annotations

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
