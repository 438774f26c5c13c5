"""Float32 numpy kernels for the few ONNX operators the zoo emits.

The builders evaluate every node on a small calibration batch while they build
it (so BatchNorm statistics come from the tensor it really sees), and the
digits trainer reuses the im2col helpers.  onnxruntime is only a development
dependency, so building a model must not need it.  These kernels are written for
the shapes the zoo produces, not as a general ONNX interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def pad_spatial(x: np.ndarray, pads: Sequence[int], value: float = 0.0) -> np.ndarray:
    """Pad the last two axes of an NCHW tensor; `pads` is ONNX order (top, left, bottom, right)."""
    top, left, bottom, right = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def windows(x: np.ndarray, kernel: tuple[int, int], stride: int) -> np.ndarray:
    """A strided view (N, C, Ho, Wo, kh, kw) of every kernel window; no copy."""
    view = sliding_window_view(x, kernel, axis=(2, 3))
    return view[:, :, ::stride, ::stride]


def im2col(x: np.ndarray, kernel: tuple[int, int], stride: int, pads: Sequence[int]) -> np.ndarray:
    """Rows of (N*Ho*Wo, C*kh*kw): one row per output pixel, so a conv is one matmul."""
    win = windows(pad_spatial(x, pads), kernel, stride)
    n, c, ho, wo, kh, kw = win.shape
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * kh * kw)


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, *,
           stride: int = 1, pads: Sequence[int] = (0, 0, 0, 0), group: int = 1) -> np.ndarray:
    """ONNX Conv (NCHW, OIHW weights) for plain, grouped and depthwise convolutions."""
    out_ch, _, kh, kw = weight.shape
    n, in_ch = x.shape[:2]
    if group == 1:
        cols = im2col(x, (kh, kw), stride, pads)
        y = cols @ weight.reshape(out_ch, -1).T
        ho = (x.shape[2] + pads[0] + pads[2] - kh) // stride + 1
        wo = (x.shape[3] + pads[1] + pads[3] - kw) // stride + 1
        y = y.reshape(n, ho, wo, out_ch).transpose(0, 3, 1, 2)
    elif group == in_ch == out_ch:
        win = windows(pad_spatial(x, pads), (kh, kw), stride)
        y = np.zeros(win.shape[:4], dtype=np.float32)
        for i in range(kh):                       # kh*kw shifted multiply-adds beat a gather
            for j in range(kw):
                y += win[..., i, j] * weight[:, 0, i, j][None, :, None, None]
    else:
        in_slices = np.split(x, group, axis=1)
        w_slices = np.split(weight, group, axis=0)
        y = np.concatenate([conv2d(xs, ws, stride=stride, pads=pads)
                            for xs, ws in zip(in_slices, w_slices)], axis=1)
    if bias is not None:
        y = y + bias[None, :, None, None]
    return np.ascontiguousarray(y, dtype=np.float32)


def max_pool(x: np.ndarray, kernel: int, stride: int, pads: Sequence[int] = (0, 0, 0, 0)) -> np.ndarray:
    """ONNX MaxPool: padding never wins the max."""
    win = windows(pad_spatial(x, pads, value=-np.inf), (kernel, kernel), stride)
    return np.ascontiguousarray(win.max(axis=(4, 5)), dtype=np.float32)


def avg_pool(x: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """ONNX AveragePool without padding (so count_include_pad does not matter)."""
    win = windows(x, (kernel, kernel), stride)
    return np.ascontiguousarray(win.mean(axis=(4, 5)), dtype=np.float32)


def batch_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
               var: np.ndarray, epsilon: float) -> np.ndarray:
    """Inference-mode BatchNormalization over axis 1."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    factor = (scale / np.sqrt(var + epsilon)).reshape(shape)
    return ((x - mean.reshape(shape)) * factor + bias.reshape(shape)).astype(np.float32)


def reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """ONNX Reshape with allowzero=0: a 0 copies the input's dimension."""
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(target)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)
