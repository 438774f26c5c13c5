"""Plain numpy references for the CPU kernels: slow, obvious, written from the ONNX definitions.

Integer results are computed in int64 and wrapped to int32 where the kernel
accumulates in int32; float results in float64 (the tests compare with a
tolerance).
"""

from __future__ import annotations

import math

import numpy as np


def requant(acc: np.ndarray, shift, clip) -> np.ndarray:
    """int64 accumulator -> the kernel's integer result (int32, or int8 after shift/clip)."""
    acc32 = acc.astype(np.int64).astype(np.int32)
    if shift is None and clip is None:
        return acc32
    lo, hi = clip if clip is not None else (-128, 127)
    return np.clip(acc32 >> (shift or 0), lo, hi).astype(np.int8)


def out_len(size, k, s, p0, p1, d=1, ceil_mode=False):
    span = size + p0 + p1 - d * (k - 1) - 1
    if not ceil_mode:
        return span // s + 1
    n = math.ceil(span / s) + 1
    if (n - 1) * s >= size + p0:  # the last window must start inside the input or the left pad
        n -= 1
    return n


def conv2d(x, w, bias=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1, shift=None, clip=None):
    integer = x.dtype == np.int8
    acc_type = np.int64 if integer else np.float64
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = out_len(h, kh, stride[0], pads[0], pads[2], dilation[0])
    ow = out_len(wd, kw, stride[1], pads[1], pads[3], dilation[1])
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), acc_type)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    y = np.zeros((n, o, oh, ow), acc_type)
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dilation[0], j * dilation[1]
                window = xp[:, g * cg:(g + 1) * cg,
                            r0:r0 + stride[0] * (oh - 1) + 1:stride[0],
                            c0:c0 + stride[1] * (ow - 1) + 1:stride[1]]
                y[:, oc] += np.tensordot(window, w[oc, :, i, j].astype(acc_type), axes=([1], [0]))
    if bias is not None:
        y += bias.astype(acc_type)[None, :, None, None]
    return requant(y, shift, clip) if integer else y


def dense(x, w, bias=None, shift=None, clip=None):
    if x.dtype == np.int8:
        acc = x.astype(np.int64) @ w.astype(np.int64).T
        if bias is not None:
            acc = acc + bias
        return requant(acc, shift, clip)
    y = x.astype(np.float64) @ w.astype(np.float64).T
    return y + bias if bias is not None else y


def _windows(x, kernel, stride, pads, dilation, ceil_mode):
    """Yield (oh, ow, row indices, column indices) with indices into the unpadded input (may be out of range)."""
    h, w = x.shape[2:]
    oh = out_len(h, kernel[0], stride[0], pads[0], pads[2], dilation[0], ceil_mode)
    ow = out_len(w, kernel[1], stride[1], pads[1], pads[3], dilation[1], ceil_mode)
    for i in range(oh):
        rows = [i * stride[0] - pads[0] + a * dilation[0] for a in range(kernel[0])]
        for j in range(ow):
            cols = [j * stride[1] - pads[1] + b * dilation[1] for b in range(kernel[1])]
            yield i, j, rows, cols, (oh, ow)


def max_pool2d(x, kernel, stride, pads, dilation=(1, 1), ceil_mode=False):
    out = None
    for i, j, rows, cols, shape in _windows(x, kernel, stride, pads, dilation, ceil_mode):
        if out is None:
            out = np.zeros(x.shape[:2] + shape, x.dtype)
        rows = [r for r in rows if 0 <= r < x.shape[2]]
        cols = [c for c in cols if 0 <= c < x.shape[3]]
        out[:, :, i, j] = x[:, :, rows][:, :, :, cols].max(axis=(2, 3))
    return out


def avg_pool2d(x, kernel, stride, pads, count_include_pad=False, ceil_mode=False):
    h, w = x.shape[2:]
    out = None
    for i, j, rows, cols, shape in _windows(x, kernel, stride, pads, (1, 1), ceil_mode):
        if out is None:
            out = np.zeros(x.shape[:2] + shape, np.float64 if x.dtype == np.float32 else np.int8)
        inside_rows = [r for r in rows if 0 <= r < h]
        inside_cols = [c for c in cols if 0 <= c < w]
        total = x[:, :, inside_rows][:, :, :, inside_cols].astype(np.float64 if x.dtype == np.float32 else np.int64)
        total = total.sum(axis=(2, 3))
        if count_include_pad:  # padded cells count, cells past the padding (ceil_mode) do not
            count = (len([r for r in rows if r < h + pads[2]]) * len([c for c in cols if c < w + pads[3]]))
        else:
            count = len(inside_rows) * len(inside_cols)
        out[:, :, i, j] = total / count if x.dtype == np.float32 else round_half_up_mean(total, count)
    return out


def round_half_up_mean(total, count):
    return np.clip(np.floor_divide(2 * total + count, 2 * count), -128, 127).astype(np.int8)


def global_avg_pool(x):
    if x.dtype == np.int8:
        total = x.astype(np.int64).sum(axis=(2, 3), keepdims=True)
        return round_half_up_mean(total, x.shape[2] * x.shape[3])
    return x.astype(np.float64).mean(axis=(2, 3), keepdims=True)


def softmax(x, axis=-1):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def quantize(x, exp):
    return np.clip(np.rint(x * np.float32(2.0 ** exp)), -128, 127).astype(np.int8)


def dequantize(q, exp):
    return q.astype(np.float32) * np.float32(2.0 ** -exp)


def batch_norm(x, scale, bias, mean, var, eps):
    shape = (1, -1, 1, 1)
    x = x.astype(np.float64)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape).astype(np.float64) + eps) * scale.reshape(shape) \
        + bias.reshape(shape)


def add_int8(a, b, shift, clip):
    return np.clip((a.astype(np.int32) + b.astype(np.int32)) >> shift, clip[0], clip[1]).astype(np.int8)


def pack_activation(x, batch, block):
    """Element by element: out[n // b, c // block, h, w, n % b, c % block] = x[n, c, h, w]."""
    n, c, h, w = x.shape
    out = np.zeros((-(-n // batch), -(-c // block), h, w, batch, block), x.dtype)
    for i in range(n):
        for j in range(c):
            out[i // batch, j // block, :, :, i % batch, j % block] = x[i, j]
    return out
