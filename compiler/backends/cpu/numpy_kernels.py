"""The host kernels in numpy: the fallback where llvmlite is missing (a PYNQ-Z1's 32-bit ARM has no wheel).

Same names, arguments, checks (`backends/host`) and error lines as the native kernels, so the runtime
swaps one namespace for the other (`cpu.select`).  Integer paths are bit-identical to the native
ones: int8 products are summed exactly in float64 (|sum| < 2**53 for any reduction under 2**38),
wrapped to int32 as the native accumulator wraps, then shifted and clipped alike.  Elementwise float
ops, pooling and data movement are bit-identical too (same IEEE operations in the same order);
float convolutions, dense, matmul, global means and softmax differ from the native kernels only by
summation order and exp's rounding (within 1e-5 relative).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Requant
from vtakit.compiler.backends.host.conv import ConvGeometry, conv_operands
from vtakit.compiler.backends.host.elementwise import (add_int8_operands, batch_norm_channels, broadcast_shape,
                                                       clip_bounds, exponent, float_pair)
from vtakit.compiler.backends.host.layout import (concat_operands, layout_array, pack_operands, pad_widths,
                                                  permutation, unpack_operands)
from vtakit.compiler.backends.host.matmul import DENSE, dense_operands, matmul_batch, matmul_operands
from vtakit.compiler.backends.host.pool import PoolSpec, avg_pool_spec, max_pool_spec
from vtakit.isa.arith import ceil_div

LABEL = "numpy fallback"


# ---------------------------------------------------------------------------------------- arithmetic
def _requantise(acc: np.ndarray, requant: Requant | None, integer: bool) -> np.ndarray:
    """An exact integer sum (int64) as the native int32 accumulator holds it, then shift, clip, int8."""
    if not integer:
        return acc
    acc = acc.astype(np.int32)  # wraps as the native int32 accumulator does
    if requant is None:
        return acc
    return np.clip(acc >> requant.shift, requant.low, requant.high).astype(np.int8)


def _exact_product(a: np.ndarray, b: np.ndarray, integer: bool) -> np.ndarray:
    """a @ b in float64 (BLAS): exact for int8 operands (returned as int64), float32 for float operands."""
    y = np.matmul(a.astype(np.float64), b.astype(np.float64))
    return y.astype(np.int64) if integer else y.astype(np.float32)


def _with_bias(acc: np.ndarray, bias: np.ndarray | None, shape: tuple[int, ...], integer: bool) -> np.ndarray:
    if bias is None:
        return acc
    if integer:
        return acc + bias.astype(np.int64).reshape(shape)
    return (acc + bias.reshape(shape)).astype(np.float32)


# ---------------------------------------------------------------------------------------- conv, dense, matmul
def _windows(xp: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """(N, C, KH, KW, OH, OW) view of the padded input: every tap of every output position."""
    sn, sc, sh, sw = xp.strides
    shape = (g.batch, g.channels, g.kernel_h, g.kernel_w, g.out_h, g.out_w)
    strides = (sn, sc, sh * g.dilation[0], sw * g.dilation[1], sh * g.stride[0], sw * g.stride[1])
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, stride=(1, 1), pads=(0, 0, 0, 0),
           dilation=(1, 1), groups: int = 1, shift: int | None = None,
           clip: tuple[int, int] | None = None) -> np.ndarray:
    """NCHW x (*) OIHW w, ONNX Conv semantics; int8 in -> int32 out, or int8 with shift/clip."""
    checked = conv_operands(x, w, bias, stride, pads, dilation, groups, shift, clip)
    x, w, bias, integer, requant, g = (checked.x, checked.w, checked.bias, checked.integer, checked.requant,
                                       checked.geometry)
    top, left, bottom, right = g.pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right))) if any(g.pads) else x
    taps = _windows(xp, g)
    if g.group_in == 1:   # depthwise (a channel multiplier allowed): one multiply-add per tap
        acc = _depthwise(taps, w, g, integer)
    else:
        acc = _grouped(taps, w, g, integer)
    acc = _with_bias(acc, bias, (1, -1, 1, 1), integer)
    return np.ascontiguousarray(_requantise(acc, requant, integer))


def _depthwise(taps: np.ndarray, w: np.ndarray, g: ConvGeometry, integer: bool) -> np.ndarray:
    work = np.int64 if integer else np.float64
    source = np.repeat(np.arange(g.channels), g.group_out)  # the input channel of each output channel
    weights = w.astype(work)
    acc = np.zeros((g.batch, g.out_channels, g.out_h, g.out_w), work)
    for kh in range(g.kernel_h):
        for kw in range(g.kernel_w):
            acc += taps[:, source, kh, kw].astype(work) * weights[:, 0, kh, kw].reshape(1, -1, 1, 1)
    return acc if integer else acc.astype(np.float32)


def _grouped(taps: np.ndarray, w: np.ndarray, g: ConvGeometry, integer: bool) -> np.ndarray:
    out = np.empty((g.batch, g.out_channels, g.positions), np.int64 if integer else np.float32)
    weights = w.reshape(g.groups, g.group_out, g.reduction)
    for n in range(g.batch):   # one image's columns at a time bounds the im2col copy
        for k in range(g.groups):
            cols = taps[n, k * g.group_in:(k + 1) * g.group_in].reshape(g.reduction, g.positions)
            out[n, k * g.group_out:(k + 1) * g.group_out] = _exact_product(weights[k], cols, integer)
    return out.reshape(g.batch, g.out_channels, g.out_h, g.out_w)


def dense(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, shift: int | None = None,
          clip: tuple[int, int] | None = None) -> np.ndarray:
    """x (N, K) @ w (O, K).T + bias; float32, or int8 with int32 / shifted-and-clipped int8 out."""
    x, w, bias, integer = dense_operands(x, w, bias)
    requant = checks.int8_requant(shift, clip, integer, "dense", DENSE)
    acc = _with_bias(_exact_product(x, w.T, integer), bias, (1, -1), integer)
    return np.ascontiguousarray(_requantise(acc, requant, integer))


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 numpy/ONNX MatMul: 1-D operands promoted, leading batch dims broadcast."""
    a, b, a_shape, b_shape = matmul_operands(a, b)
    matmul_batch(a_shape, b_shape)
    return np.ascontiguousarray(_exact_product(a, b, integer=False))


# ---------------------------------------------------------------------------------------- elementwise
def _float_pair(a, b, op: str) -> list[np.ndarray]:
    a, b = float_pair(a, b, op)
    broadcast_shape([a.shape, b.shape], op)
    return [a, b]


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 a + b with numpy broadcasting."""
    a, b = _float_pair(a, b, "add")
    return np.ascontiguousarray(np.add(a, b))


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 a - b with numpy broadcasting."""
    a, b = _float_pair(a, b, "sub")
    return np.ascontiguousarray(np.subtract(a, b))


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 a * b with numpy broadcasting."""
    a, b = _float_pair(a, b, "mul")
    return np.ascontiguousarray(np.multiply(a, b))


def _fclamp(x: np.ndarray, low, high) -> np.ndarray:
    """The native clamp: low where x < low, high where x > high, NaN passes (np.clip's behaviour)."""
    low, high = np.float32(low), np.float32(high)
    x = np.where(x < low, low, x)
    return np.where(x > high, high, x).astype(np.float32)


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0) for float32, int8 or int32 (NaN stays NaN)."""
    x = checks.array(x, "x", "relu", [checks.FLOAT32, checks.INT8, checks.INT32])
    return np.where(x < 0, x.dtype.type(0), x)


def clip(x: np.ndarray, lo, hi) -> np.ndarray:
    """np.clip(x, lo, hi) for float32 or int8 (bounds must fit int8 for int8 x)."""
    op = "clip"
    x = checks.array(x, "x", op, [checks.FLOAT32, checks.INT8])
    low, high = clip_bounds(x.dtype, lo, hi, op)
    if x.dtype == checks.INT8:
        return np.minimum(np.maximum(x, np.int8(low)), np.int8(high))
    return _fclamp(x, low, high)


def add_int8(a: np.ndarray, b: np.ndarray, *, shift: int = 0, clip: tuple[int, int] = (-128, 127)) -> np.ndarray:
    """clip((int32(a) + int32(b)) >> shift, lo, hi) as int8, broadcasting a and b."""
    op = "add_int8"
    a, b, (amount, low, high) = add_int8_operands(a, b, shift, clip, op)
    broadcast_shape([a.shape, b.shape], op)
    total = a.astype(np.int32) + b.astype(np.int32)
    return np.ascontiguousarray(np.clip(total >> amount, low, high).astype(np.int8))


def quantize(x: np.ndarray, exp: int) -> np.ndarray:
    """float32 -> int8: clip(round_half_even(x * 2**exp), -128, 127) (NaN -> 0, as the native cast gives)."""
    x = checks.array(x, "x", "quantize", [checks.FLOAT32])
    scaled = np.rint(x * np.float32(2.0 ** exponent(exp, "quantize")))
    clipped = _fclamp(scaled, -128.0, 127.0)
    return np.where(np.isnan(clipped), np.float32(0), clipped).astype(np.int8)


def dequantize(q: np.ndarray, exp: int) -> np.ndarray:
    """int8 or int32 -> float32 q * 2**-exp (exact up to int32 -> float32 rounding)."""
    q = checks.array(q, "q", "dequantize", [checks.INT8, checks.INT32])
    return q.astype(np.float32) * np.float32(2.0 ** -exponent(exp, "dequantize"))


def batch_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
               eps: float = 1e-5) -> np.ndarray:
    """Inference batch norm on NCHW float32: (x - mean) * scale / sqrt(var + eps) + bias."""
    op = "batch_norm"
    x = checks.array(x, "x", op, [checks.FLOAT32], ndim=4)
    mean_c, factor_c, bias_c = batch_norm_channels(x, scale, bias, mean, var, eps, op)
    return ((x - mean_c) * factor_c + bias_c).astype(np.float32)


# ---------------------------------------------------------------------------------------- pooling
def _pool(x: np.ndarray, spec: PoolSpec, divisors: np.ndarray | None) -> np.ndarray:
    """The native kernel's walk: a filled plane, then the taps combined in (kh, kw) order."""
    n, c, h, w = spec.shape
    work = x.dtype if spec.kind == "max" else (np.int32 if spec.integer else np.float32)
    if spec.copies:
        fill = (-128 if spec.integer else -np.inf) if spec.kind == "max" else 0
        plane = np.full((n, c, *spec.plane), fill, work)
        plane[:, :, spec.pads[0]:spec.pads[0] + h, spec.pads[1]:spec.pads[1] + w] = x
    else:
        plane = x.astype(work, copy=False)
    (oh, ow), (sh, sw), (dh, dw) = spec.out, spec.stride, spec.dilation
    acc = None
    for kh in range(spec.kernel[0]):
        for kw in range(spec.kernel[1]):
            value = plane[:, :, kh * dh:kh * dh + sh * (oh - 1) + 1:sh, kw * dw:kw * dw + sw * (ow - 1) + 1:sw]
            if acc is None:
                acc = value.copy()
            elif spec.kind == "max":
                acc = np.where(value > acc, value, acc)
            else:
                acc = acc + value
    assert acc is not None and divisors is not None or spec.kind == "max"
    if spec.kind == "max":
        return np.ascontiguousarray(acc)
    if spec.integer:
        return np.clip(_round_half_up(acc, divisors), -128, 127).astype(np.int8)
    return np.ascontiguousarray((acc / divisors).astype(np.float32))


def _round_half_up(total: np.ndarray, twice_count) -> np.ndarray:
    """floor((2 total + c) / (2 c)) in double precision, as the native kernels compute it."""
    return np.floor((total.astype(np.float64) * 2.0 + twice_count * 0.5) / twice_count).astype(np.int32)


def max_pool2d(x: np.ndarray, *, kernel, stride, pads, dilation=(1, 1), ceil_mode: bool = False) -> np.ndarray:
    """ONNX MaxPool on NCHW float32 or int8; pads (top, left, bottom, right) never win."""
    op = "max_pool2d"
    x = checks.array(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    return _pool(x, max_pool_spec(x, op, kernel, stride, pads, dilation, ceil_mode), None)


def avg_pool2d(x: np.ndarray, *, kernel, stride, pads, count_include_pad: bool = False,
               ceil_mode: bool = False) -> np.ndarray:
    """ONNX AveragePool on NCHW float32; int8 rounds the mean half up and clips to int8."""
    op = "avg_pool2d"
    x = checks.array(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    return _pool(x, *avg_pool_spec(x, op, kernel, stride, pads, count_include_pad, ceil_mode))


def global_avg_pool(x: np.ndarray) -> np.ndarray:
    """NCHW -> NC11 mean; int8 rounds half up (as avg_pool2d with c = H*W)."""
    x = checks.array(x, "x", "global_avg_pool", [checks.FLOAT32, checks.INT8], ndim=4)
    n, c, h, w = x.shape
    if x.dtype == checks.INT8:
        total = x.reshape(n, c, h * w).astype(np.int32).sum(axis=2, dtype=np.int32)
        mean = np.clip(_round_half_up(total, 2.0 * h * w), -128, 127).astype(np.int8)
    else:
        mean = (x.reshape(n, c, h * w).sum(axis=2, dtype=np.float32) / np.float32(h * w)).astype(np.float32)
    return mean.reshape(n, c, 1, 1)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along `axis` (ONNX Softmax-13), float32."""
    op = "softmax"
    x = checks.array(x, "x", op, [checks.FLOAT32])
    axis = checks.reduction_axis(x, axis, op)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return np.ascontiguousarray((e / e.sum(axis=axis, keepdims=True)).astype(np.float32))


# ---------------------------------------------------------------------------------------- layout
def transpose(x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    """np.transpose(x, perm) materialised contiguously (rank <= 6)."""
    x = layout_array(x, "x", "transpose")
    return np.ascontiguousarray(x.transpose(permutation(perm, x.ndim, "transpose")))


def pad(x: np.ndarray, pads: Sequence[int], value=0) -> np.ndarray:
    """ONNX Pad (constant mode): pads = [x1_begin, x2_begin, ..., x1_end, x2_end, ...], all >= 0."""
    op = "pad"
    x = layout_array(x, "x", op)
    widths = pad_widths(x, pads, value, op)
    return np.pad(x, list(zip(widths.begins, widths.ends)), constant_values=widths.fill)


def concat(xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
    """np.concatenate(xs, axis) for arrays of one dtype and rank."""
    arrays, axis = concat_operands(xs, axis, "concat")
    return np.concatenate(arrays, axis=axis)


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(N, C, H, W) -> (N/b, C/block, H, W, b, block), zero padded (as compiler.runtime)."""
    x, batch, block = pack_operands(x, batch, block, "pack_activation")
    n, c, h, w = x.shape
    nb, cb = ceil_div(n, batch), ceil_div(c, block)
    if (nb * batch, cb * block) != (n, c):
        x = np.pad(x, ((0, nb * batch - n), (0, cb * block - c), (0, 0), (0, 0)))
    return np.ascontiguousarray(x.reshape(nb, batch, cb, block, h, w).transpose(0, 2, 4, 5, 1, 3))


def unpack_activation(y: np.ndarray, n: int, c: int) -> np.ndarray:
    """(N/b, C/block, H, W, b, block) -> (N, C, H, W), dropping the padding."""
    y, n, c = unpack_operands(y, n, c, "unpack_activation")
    nb, cb, h, w, batch, block = y.shape
    full = y.transpose(0, 4, 1, 5, 2, 3).reshape(nb * batch, cb * block, h, w)
    return np.ascontiguousarray(full[:n, :c])
