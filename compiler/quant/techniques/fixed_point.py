"""Per-channel fixed-point requantization (the TFLite / ONNX QLinear scheme) for configurations with ALU MUL.

With power-of-two scales a conv/dense channel's requantization factor s_x * s_w[c] / s_y is a power of
two and the epilogue is a shift.  With the MUL extension the weights keep float per-channel scales
(`weight_scales`: the least-squared-error scale at or below max|w[c]| / 127, no power-of-two rounding; the
activations keep their power-of-two exponents) and the factor f[c] becomes

    y[c] = clip((((acc + bias'[c]) >> p) * M[c]) >> n[c])      with f[c] ~= M[c] * 2**-(p + n[c])

on the accelerator: an immediate SHR by p common to the layer, one MUL by the per-channel vector M (a
tensor operand in the accumulator buffer, loaded once per output-channel tile like the shift vector),
the SHR by n (an immediate common part and a vector, `te.split_channel_shift`), then the clip.  The
host computes the same integers (`ops/epilogues.requantize_channels`).

Why the widths: the ALU multiplies int32 by int32 and keeps the low 32 bits, so a product must stay
inside int32 for every input the layer can see, not only the calibrated ones (a wrapped product is a
wrong sign, not a saturated value).  The bound of |acc + bias'[c]| is exact from the weights
(128 * sum|w_q[c]| + |bias'[c]|); p is the smallest pre-shift that keeps (|acc| >> p) * M[c] inside
int32.  So each multiplier bit costs a pre-shift bit once the bound is large: B bits of M cost about
2**-B relative error (|y| * 2**-B output steps), p pre-shift bits cost up to 2**p * f[c] output steps.
One width for all layers loses either way (EfficientNet-Lite0 on the photos, host int8 = accelerator
bits: B = 8 cosine 0.9835, 10: 0.9832, 12: 0.9806, 16: 0.9747, the pre-shift of its wide 1x1 layers
dominating at 16), so `best_fixed_point` picks B per layer (6..16) by the estimated added error
(`epilogue_error`).  Round to nearest: bias' carries half an output step and half a pre-shift step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.options import RequantMode
from vtakit.compiler.quant.techniques.channel_scales import BIAS_LIMIT, CHANNEL_SPREAD, channel_attr

MULT_BITS = 12
"""Significant bits of each channel's multiplier where the caller fixes the width (`fixed_point`)."""
BITS_RANGE = range(6, 17)
"""Multiplier widths `best_fixed_point` weighs per layer."""
VECTOR_ERROR = 0.01
"""Mean squared error (output steps) one shift for all channels may add to save the shift vector: an eighth
of int8 rounding's own 1/12."""
TYPICAL_OUTPUT = 64
"""|y| at which `epilogue_error` judges the multiplier's relative error (half the int8 range)."""
HEADROOM = 8
"""Requantization factors up to about 2**HEADROOM are allowed (an output finer than its accumulator):
with a multiplier they cost nothing, so `quantize` need not coarsen an output exponent for its weights,
as power-of-two shifts (>= 0) must; M[c] then has up to HEADROOM bits more than its width, still inside int32
with the pre-shift `fixed_point` finds."""
INT32_MAX = 2 ** 31 - 1


def check_requant(mode: RequantMode | str, alu_mul: bool, label: str) -> RequantMode:
    """The requantization scheme `mode` resolves to on a configuration: "auto" is multipliers where it has
    ALU MUL, else power-of-two shifts (one clear error where it cannot)."""
    mode = RequantMode.parse(mode)
    if mode is RequantMode.MULTIPLIER and not alu_mul:
        raise CompileError(f"requant 'multiplier' needs the ALU MUL extension: config {label} has none "
                           f"(alu_mul is false); use requant 'pow2' or a configuration such as pynq_mul")
    if mode is RequantMode.AUTO:
        return RequantMode.MULTIPLIER if alu_mul else RequantMode.POW2
    return mode


SCALE_FRACTIONS = np.linspace(0.5, 1.0, 26)
"""Candidate weight scales, as fractions of max|w[c]| / 127: each channel takes the least squared error."""


def weight_scales(w: np.ndarray) -> np.ndarray:
    """s_w[c] per output channel: among SCALE_FRACTIONS of max|w[c]| / 127 (which clips nothing), the one
    with the least squared error (clipping a channel's rare largest weights buys the others resolution,
    as the power-of-two exponents' choice does); 1.0 for an all-zero channel, whose weights stay 0."""
    rows = w.reshape(w.shape[0], -1).astype(np.float64)
    amax = np.max(np.abs(rows), axis=1)
    top = np.where(amax > 0, amax / 127.0, 1.0)
    best, err = top, np.full(len(top), np.inf)
    for r in SCALE_FRACTIONS:
        s = (top * r)[:, None]
        e = np.sum(np.square(np.clip(np.rint(rows / s), -127, 127) * s - rows), axis=1)
        better = e < err
        best, err = np.where(better, top * r, best), np.where(better, e, err)
    return best


def weight_roundtrip(w: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
    """The float value of `w` after per-channel float-scale int8 quantization (bias correction's view), at
    `weight_scales(w)` or the given per-channel `scales` (a QDQ model's own)."""
    s = (weight_scales(w) if scales is None else np.asarray(scales, np.float64)).reshape((-1,) + (1,) * (w.ndim - 1))
    return np.clip(np.rint(w.astype(np.float64) / s), -127, 127) * s


@dataclass(frozen=True)
class FixedPoint:
    """One layer's requantization: (acc + rounding[c]) >> pre_shift, times multipliers[c], >> shifts[c]."""

    pre_shift: int
    multipliers: np.ndarray  # int64, >= 0
    shifts: np.ndarray       # int64, 0 <= shift < 32, spread <= CHANNEL_SPREAD
    rounding: np.ndarray     # int64: half an output step and half a pre-shift step, added to the bias


def fixed_point(factors: np.ndarray, bounds: np.ndarray, bits: int = MULT_BITS, name: str = "",
                spread: int = CHANNEL_SPREAD) -> FixedPoint:
    """Multipliers and shifts for per-channel factors f[c] >= 0 on accumulators with |acc[c]| <= bounds[c]
    (the bias included, the rounding not): the smallest common pre-shift p with
    ((bounds[c] + rounding[c]) >> p) + 1) * M[c] <= INT32_MAX, M[c] = round(f[c] * 2**(p + n[c])) of `bits`
    bits where the shift allows (n[c] >= 0, spread over at most `spread`, below 32; spread 0: one shift
    for all, the smaller channels' multipliers having fewer bits).  A channel so
    small that its rounding term would not fit int32 beside the bias always rounds to 0: M[c] = 0."""
    f = np.asarray(factors, np.float64)
    bounds = np.asarray(bounds, np.int64)
    zeros = np.zeros(f.size, np.int64)
    live = f > 0
    if not live.any():
        return FixedPoint(0, zeros, zeros, zeros)
    total = zeros.copy()  # p + n[c] giving M[c] `bits` bits
    total[live] = bits - 1 - np.floor(np.log2(f[live])).astype(np.int64)
    for p in range(32):
        n = np.maximum(total - p, 0)
        lo = int(n[live].min())
        n = np.clip(n, lo, min(lo + spread, 31))
        m = np.where(live, np.rint(f * np.exp2((p + n).astype(np.float64))), 0).astype(np.int64)
        half = np.floor(np.exp2((p + n - 1).astype(np.float64)) / np.maximum(m, 1))
        m = np.where(half + bounds > BIAS_LIMIT, 0, m)
        rounding = np.where(m > 0, half, 0).astype(np.int64) + (1 << p >> 1)
        if np.all((((bounds + rounding) >> p) + 1) * m <= INT32_MAX):
            return FixedPoint(p, m, n.astype(np.int64), rounding)
    raise CompileError("no pre-shift keeps the multiplied accumulator inside int32 "
                       f"(largest factor {float(f.max()):.3g})", node=name or None)


def epilogue_error(fp: FixedPoint, factors: np.ndarray) -> float:
    """Mean squared error (in output steps, over the live channels) the epilogue adds to exact rounding:
    the multiplier's relative error at a typical |y| of TYPICAL_OUTPUT, and the pre-shift's dropped bits
    (uniform over 2**p accumulator units, f[c] output steps each)."""
    f = np.asarray(factors, np.float64)
    live = (f > 0) & (fp.multipliers > 0)
    if not live.any():
        return 0.0
    exact = fp.multipliers[live] * np.exp2(-(fp.pre_shift + fp.shifts[live]).astype(np.float64))
    relative = np.abs(exact - f[live]) / f[live]
    return float(np.mean(np.square(relative * TYPICAL_OUTPUT) + np.square(2.0 ** fp.pre_shift * f[live]) / 12))


def best_fixed_point(factors: np.ndarray, bounds: np.ndarray, name: str = "") -> FixedPoint:
    """`fixed_point` with the multiplier width in BITS_RANGE whose `epilogue_error` is least: a layer whose
    accumulator bound is large pays for each multiplier bit with a pre-shift bit (see the module docstring).
    One shift for all channels (no shift vector: an ALU pass with a tensor operand, 2 cycles per output
    entry, saved) where that adds at most VECTOR_ERROR to the error."""
    def best(spread: int) -> tuple[float, FixedPoint]:
        fits = [fixed_point(factors, bounds, b, name, spread) for b in BITS_RANGE]
        return min(((epilogue_error(fp, factors), fp) for fp in fits), key=lambda t: t[0])

    (err, fp), (err0, fp0) = best(CHANNEL_SPREAD), best(0)
    return fp0 if err0 <= err + VECTOR_ERROR else fp


def fixed_requant(w: np.ndarray, bias: np.ndarray, e_x: int, e_y: int, clip: tuple[int, int], name: str,
                  scales: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Int8 weights (float per-channel scales: `weight_scales`, or `scales`, a QDQ model's own), int32 bias
    and the QConv/QDense attributes of the fixed-point epilogue for input exponent e_x and output
    exponent e_y (power-of-two activations)."""
    s_w = weight_scales(w) if scales is None else np.asarray(scales, np.float64)
    s_x = 2.0 ** -e_x
    # a bias too large for int32 at the channel's scale coarsens that channel's weight scale
    s_w = np.maximum(s_w, np.abs(bias.astype(np.float64)) / (s_x * BIAS_LIMIT))
    rows = np.clip(np.rint(w.astype(np.float64) / s_w.reshape((-1,) + (1,) * (w.ndim - 1))), -127, 127)
    w_q = rows.astype(np.int8)
    bias_q = np.rint(bias.astype(np.float64) / (s_x * s_w)).astype(np.int64)
    flat = w_q.reshape(w.shape[0], -1).astype(np.int64)
    factors = np.where(np.any(flat != 0, axis=1) | (bias_q != 0), s_x * s_w * 2.0 ** e_y, 0.0)
    fp = best_fixed_point(factors, 128 * np.sum(np.abs(flat), axis=1) + np.abs(bias_q), name=name)
    attrs = dict(pre_shift=fp.pre_shift, multiplier=tuple(int(m) for m in fp.multipliers),
                 shift=channel_attr(fp.shifts), clip=clip)
    return w_q, bias_q + fp.rounding, attrs
