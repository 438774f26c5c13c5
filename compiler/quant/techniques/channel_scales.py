"""Per-output-channel power-of-two weight scales, requantized by a per-channel shift.

After batch norm is folded, the weight ranges of a layer's output channels differ by orders of
magnitude: one power-of-two scale per tensor leaves the small channels a handful of int8 levels.
Here every output channel c of a Conv (grouped and depthwise included) or Dense gets its own
least-squared-error exponent e_w[c], so the int32 accumulator of channel c has scale
2**-(e_x + e_w[c]) and is requantized to the output's exponent e_y by its own right shift
s[c] = e_x + e_w[c] - e_y.  On unmodified VTA hardware that is one ALU SHR whose operand is a
per-channel vector in the accumulator buffer (`compiler.backends.vta.te.split_channel_shift`): the amount
is read from 5 signed bits, so the exponents of one layer may spread over at most
`CHANNEL_SPREAD` (15); a channel that would want a finer one is clamped, which costs it nothing
visible, since its outputs are then at least 2**15 times smaller than the largest channel's and
share that channel's output scale.  A layer whose channels are alike keeps one exponent
(`weight_exps`), and so its immediate SHR.
"""

from __future__ import annotations

import numpy as np


CHANNEL_SPREAD = 15
"""The most the weight exponents of one layer may differ: VTA's SHR reads amounts -16..15."""
CHANNEL_GAIN = 1.0
"""Per-channel exponents are used where they divide the channels' mean relative squared weight error
by at least this much.  The vector SHR (a tensor-operand ALU pass, twice an immediate one's cycles)
costs cycles (ResNet-18's demo: +1.4 % at 1.0, +0.7 % at 2.0), but real networks need it: the
pretrained EfficientNet-Lite0 on the bundled photos (benchmarks/real_accuracy.py) agrees with float
on 83 % of top-1 with logits cosine 0.974 at 1.0, 71 % and 0.933 at 2.0."""
BIAS_LIMIT = 2 ** 30
"""A quantized bias stays below this (int32 with room for the products and the rounding half-LSB)."""


def row_errors(rows: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The squared error of every row quantized to -127..127 at its own exponent e[c], clipping included:
    quantize._weight_error's arithmetic (elementwise in the rows' dtype, the rounding error summed in
    float64, the clipping error in the rows' dtype), all rows at once."""
    e = np.asarray(e, np.int64).reshape(-1, 1)
    limit = (127 * 2.0 ** -e).astype(rows.dtype)
    clipped = np.clip(rows, -limit, limit)
    scale = (2.0 ** e).astype(np.float32)
    q = np.clip(np.rint(clipped * scale), -128, 127)
    rounding = np.sum(np.square(q / scale - clipped), axis=1, dtype=np.float64)
    return rounding + np.sum(np.square(rows - clipped), axis=1).astype(np.float64)


def best_row_exps(rows: np.ndarray, ideal, top: int) -> np.ndarray:
    """Every row's least-squared-error exponent among the one that clips nothing (`ideal(max|row|)`) and
    the three finer, at most `top`; of equal errors the coarser (quantize._weight_exp, row by row)."""
    first = np.array([ideal(float(m)) for m in np.max(np.abs(rows), axis=1)], np.int64)
    candidates = first[:, None] + np.arange(4)
    errors = np.stack([row_errors(rows, np.minimum(c, top)) for c in candidates.T], axis=1)
    errors[candidates > top] = np.inf
    return candidates[np.arange(len(rows)), np.argmin(errors, axis=1)]


def finest_allowed(exps: np.ndarray) -> int:
    """The finest exponent a layer's channels may take beside `exps`: one vector SHR spans CHANNEL_SPREAD."""
    return int(np.min(exps)) + CHANNEL_SPREAD


def channel_weight_exps(w: np.ndarray, ideal, top: int) -> np.ndarray:
    """The least-squared-error exponent of every output channel (`best_row_exps`), spread over at most
    CHANNEL_SPREAD; all-zero channels take the finest exponent allowed."""
    rows = w.reshape(w.shape[0], -1)
    live = np.max(np.abs(rows), axis=1) > 0
    if not live.any():
        return np.full(w.shape[0], best_row_exps(rows.reshape(1, -1), ideal, top)[0], np.int64)
    exps = np.where(live, best_row_exps(rows, ideal, top), 0)
    finest = finest_allowed(exps[live])
    return np.where(live, np.minimum(exps, finest), finest)


def weight_exps(w: np.ndarray, exponent, ideal, top: int) -> np.ndarray:
    """Exponents of w's output channels: per channel (`channel_weight_exps`) where that divides the
    channels' mean relative squared error (`row_errors` over the channel's energy) by CHANNEL_GAIN,
    else the per-tensor `exponent(w)` for all.  Relative, because a small channel's error is small in
    absolute terms however few int8 levels it gets."""
    e_t = exponent(w)
    e_c = channel_weight_exps(w, ideal, top)
    rows = w.reshape(w.shape[0], -1)
    energy = np.sum(np.square(rows, dtype=np.float64), axis=1)
    live = energy > 0
    if not live.any():
        return np.full(w.shape[0], e_t, np.int64)
    per_tensor = sum((row_errors(rows, np.full(len(rows), e_t))[live] / energy[live]).tolist())
    per_channel = sum((row_errors(rows, e_c)[live] / energy[live]).tolist())
    if per_channel * CHANNEL_GAIN <= per_tensor:
        return e_c
    return np.full(w.shape[0], e_t, np.int64)


def fit_bias(e_w: np.ndarray, bias: np.ndarray, e_x: int) -> np.ndarray:
    """Coarsen the channels whose quantized bias would not fit int32 (never below the coarsest
    channel, so no shift turns negative): bias_q[c] = bias[c] * 2**(e_x + e_w[c]) < BIAS_LIMIT."""
    amax = np.abs(bias.astype(np.float64))
    with np.errstate(divide="ignore"):
        room = np.floor(np.log2(BIAS_LIMIT / np.where(amax > 0, amax, 1.0))).astype(np.int64) - e_x
    allowed = np.where(amax > 0, room, e_w)
    return np.maximum(np.minimum(e_w, allowed), int(e_w.min()))


def channel_attr(values: np.ndarray) -> int | tuple[int, ...]:
    """A QConv/QDense `shift` or `weight_exp`: one int when every channel agrees (a shift is then the
    immediate SHR, as per tensor), else a tuple with one per output channel."""
    if np.all(values == values[0]):
        return int(values[0])
    return tuple(int(v) for v in values)
