"""numpy reference implementations of the operators, straight from their definitions.

Used to check results (tests, `vtakit bench`); deliberately simple: int64 arithmetic,
then the same wrap and cast the accelerator applies.
"""

import numpy as np


def conv2d(x, w, stride=1, pad=0, bias=None, shift=None, clip=None, groups=1, multiplier=None, pre_shift=0):
    """`pad`: one value for every side, or (top, left, bottom, right); `groups`: input channels split
    into that many groups (w has c / groups input channels; groups == c is a depthwise convolution);
    `multiplier` (per output channel): >> pre_shift and times it (int32 wrap) before the shift."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    top, left, bottom, right = (pad,) * 4 if np.ndim(pad) == 0 else pad
    xp = np.zeros((n, c, h + top + bottom, wd + left + right), np.int64)
    xp[:, :, top:top + h, left:left + wd] = x
    oh, ow = (h + top + bottom - kh) // stride + 1, (wd + left + right - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    og = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, i:i + stride * oh:stride, j:j + stride * ow:stride]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", win,
                                                         w[g * og:(g + 1) * og, :, i, j].astype(np.int64))
    out = out.astype(np.int32).astype(np.int64)          # the accumulator wraps at 32 bits
    if bias is not None:
        out = (out + bias.astype(np.int64)[None, :, None, None]).astype(np.int32).astype(np.int64)
    if multiplier is not None:
        m = np.asarray(multiplier, np.int64)[None, :, None, None]
        out = ((out >> pre_shift) * m).astype(np.int32).astype(np.int64)
    if shift is None and clip is None and multiplier is None:
        return out.astype(np.int32)
    if shift is not None and np.ndim(shift) == 1:  # one shift per output channel
        out = out >> np.asarray(shift, np.int64)[None, :, None, None]
    elif shift:
        out = out >> shift
    lo, hi = clip if clip is not None else (-128, 127)
    return np.clip(out, lo, hi).astype(np.int8)


def dense(x, w, **kw):
    return conv2d(x[:, :, None, None], w[:, :, None, None], **kw)[:, :, 0, 0]


def add(a, b, shift=None, clip=(-128, 127)):
    out = a.astype(np.int64) + b
    if shift:
        out >>= shift
    return np.clip(out, *clip).astype(np.int8)


def relu(x):
    return np.maximum(x, 0).astype(np.int8)


def requantize(x, shift, clip=(-128, 127), multiplier=1):
    scaled = (x.astype(np.int64) * multiplier).astype(np.int32).astype(np.int64)  # int32 wraparound
    return np.clip(scaled >> shift, *clip).astype(np.int8)


def max_pool2d(x, kernel, stride, pad):
    n, c, h, w = x.shape
    xp = np.full((n, c, h + 2 * pad, w + 2 * pad), -1000, np.int64)
    xp[:, :, pad:pad + h, pad:pad + w] = x
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    out = np.full((n, c, oh, ow), -1000, np.int64)
    for i in range(kernel):
        for j in range(kernel):
            out = np.maximum(out, xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride])
    return out.astype(np.int8)
