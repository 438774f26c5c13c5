"""Int8 weights rounded for the layer's output, not weight by weight (GPTQ), at the same exponents.

Rounding each weight to nearest makes each weight's own error small, but not the layer's output
error. Take a 3x3 kernel that takes differences of neighbouring pixels, as many do once batch norm
is folded. On smooth input its taps' rounding errors add up through the input's local mean, while
the output they should give cancels out. EfficientNet-Lite0's stem lost more to that (output SQNR
32 dB from its weights) than to its int8 input (47 dB).

GPTQ (Frantar et al. 2022, after Optimal Brain Quantization) rounds a layer's input columns one at a
time. Each column's rounding error is pushed onto the columns not yet rounded, weighted by the
inverse of H = X^T X, the second moment of the layer's input patches X over the calibration samples.
The result is the least-squares answer to "which int8 weights bring W_q X closest to W X".

The weights' power-of-two exponents stay those `quantize` picks (`quantize.weight_exponents`), so the
accelerator programs keep their shape. The int8 values differ, and so do the biases. Bias correction
takes a rounded layer's mean output shift over its real input patches (`plan_rounding`'s shifts). A
corrected bias can move an activation's calibrated maximum across a power of two, so cycle counts can differ a little.

GPTQ trusts the calibration samples, so each output channel is checked on samples it was not fitted
on (`round_layer`): rounded on one half of the samples, measured on the other, both ways. It keeps
GPTQ only where that beats rounding to nearest.

It is never applied blindly: `weight_rounding="gptq"` (`--weight-rounding gptq`) asks for it, and the
default "auto" takes it only where the network's outputs on the calibration samples favour it
(recipe_search.py). On
EfficientNet-Lite0 it lifts the logits cosine on photos from 0.990 to 0.994. RapidOCR's direction
classifier loses (0.969 -> 0.940), even when calibrated on strips of the very scan it is tested on. The
loss sits in the layers that read pooled values and stay nearest, and the held-out check does not see
it. Figures: docs/quantization.md and docs/results.md.

Where the model is rounded to nearest anyway:
- a layer for which the samples give fewer than MIN_ROWS_PER_INPUT rows of X per input column (a
  squeeze-and-excitation conv sees one pooled vector per sample, a classifier one row). There H is
  estimated from too little, and the compensation would fit the calibration samples.
- a QDQ model, whose weights keep the model's own values (qdq.py);
- multipliers (requant "multiplier": float per-channel weight scales).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from vtakit.compiler.quant.techniques.equalize import has_const_weights
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.ops import int8_rule
from vtakit.compiler.options import QUANT_OPTIONS, RequantMode, WeightRoundingMode
from vtakit.compiler.quant.techniques.registry import Stage, Technique, WeightState, register

MIN_ROWS_PER_INPUT = 8
"""A layer is rounded by GPTQ only where the samples give at least this many rows of input patches per
input column. RapidOCR's direction classifier has squeeze-and-excitation convs that see 8 rows for 32-200
inputs; rounding those by GPTQ too lowered its softmax cosine by a further 0.03 (a prototype without the
held-out check)."""
DAMPING = 0.01
"""Added to H's diagonal, as a fraction of its mean: keeps the inverse finite where inputs are collinear
(GPTQ's own default)."""
BLOCK = 128
"""Columns rounded between two matrix products that carry their errors to the rest (GPTQ's lazy batch)."""
ROUNDED_KEY = "rounded"
"""`quantize`'s weight cache holds (ROUNDED_KEY, node name) -> (exponents, int8 weights)."""
ROWS_CHUNK = 8192
"""Patch rows turned into H at a time (bounds the float64 copy of a large feature map)."""


@dataclass
class WeightRounding:
    """What `plan_rounding` did, for the compile notes."""
    layers: int = 0  # conv/dense layers asked about
    rounded: list[str] = field(default_factory=list)  # layers with at least one channel rounded by GPTQ
    few_rows: list[str] = field(default_factory=list)  # too few rows per input column (or H not invertible)
    channels: int = 0  # output channels rounded by GPTQ
    considered: int = 0  # output channels of the layers with enough rows

    def summary(self) -> str:
        return (f"weight rounding gptq: {self.channels} of {self.considered} output channels in {len(self.rounded)} "
                f"of {self.layers} conv/dense layers, where it lowered the error on held-out calibration samples; "
                f"{len(self.few_rows)} layers with too few calibration rows per input rounded to nearest")


def _groups(n: Node) -> int:
    return n.attrs.get("group", 1) if n.op == "Conv" else 1


def patch_rows(n: Node, x: np.ndarray, w_shape: tuple[int, ...], groups: int) -> np.ndarray:
    """The rows of X a conv/dense multiplies its weights with, one per output position, as
    (rows, groups, inputs per group), inputs ordered as the weights' (channel, kernel row, kernel column)."""
    if n.op == "Dense":
        return x.reshape(-1, 1, w_shape[1])
    kh, kw = w_shape[2:]
    if x.ndim == 3:  # a 1-D convolution, on its (N, C, L, 1) view (ops/window.py)
        x = x[..., None]
    top, left, bottom, right = n.attrs["pads"]
    (sh, sw), (dh, dw) = n.attrs["strides"], n.attrs["dilations"]
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    view = sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    view = view[:, :, ::sh, ::sw, ::dh, ::dw]
    batch, channels, ho, wo = view.shape[:4]
    return view.transpose(0, 2, 3, 1, 4, 5).reshape(batch * ho * wo, groups, channels // groups * kh * kw)


def _rows_per_sample(g: Graph, n: Node) -> int:
    out = g.tensors[n.outputs[0]].shape
    return int(np.prod(out[:1] + out[2:])) if n.op == "Conv" else int(np.prod(out[:-1]))


def _inputs_per_row(g: Graph, n: Node) -> int:
    """d: the inputs one output channel reads (a group's channels times the kernel)."""
    return int(np.prod(g.consts[n.inputs[1]].shape[1:]))


def _second_moment(rows: np.ndarray) -> np.ndarray:
    """X^T X per group of rows (rows, groups, d), in float64 a chunk at a time."""
    h = 0.0
    for i in range(0, len(rows), ROWS_CHUNK):
        chunk = rows[i:i + ROWS_CHUNK].astype(np.float64).transpose(1, 0, 2)  # (groups, rows, d)
        h = h + chunk.transpose(0, 2, 1) @ chunk
    return h


def input_moments(g: Graph, samples: list[dict[str, np.ndarray]], nodes: list[Node]
                  ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """node name -> the second moments H (groups, d, d) of its input patches over two halves of the samples
    (alternate samples; one sample's rows split in two), and the mean patch (groups, d), on the float graph."""
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        readers.setdefault(n.inputs[0], []).append(n)
    moments: dict[str, list] = {n.name: [0.0, 0.0] for n in nodes}
    sums: dict[str, list] = {n.name: [0.0, 0] for n in nodes}

    def observe(index: int, name: str, value: np.ndarray) -> None:
        for n in readers.get(name, ()):
            rows = patch_rows(n, np.asarray(value, np.float32), g.consts[n.inputs[1]].shape, _groups(n))
            total = sums[n.name]
            total[0], total[1] = total[0] + rows.sum(axis=0, dtype=np.float64), total[1] + len(rows)
            halves = moments[n.name]
            if len(samples) > 1:
                halves[index % 2] = halves[index % 2] + _second_moment(rows)
            else:
                cut = len(rows) // 2
                halves[0], halves[1] = halves[0] + _second_moment(rows[:cut]), halves[1] + _second_moment(rows[cut:])

    for i, feeds in enumerate(samples):
        for name, v in feeds.items():
            observe(i, name, v)
        run_graph(g, feeds, observer=lambda name, value, i=i: observe(i, name, value))
    return {k: (a, b, sums[k][0] / sums[k][1]) for k, (a, b) in moments.items()
            if not np.isscalar(a) and not np.isscalar(b)}


def gptq_round(w: np.ndarray, exps: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The int8 weights (-127..127) of w (groups, rows, d) at per-row exponents exps (groups, rows), the
    columns rounded in order with each one's error spread by H (groups, d, d); np.linalg.LinAlgError
    where H cannot be inverted."""
    scale = 2.0 ** exps.astype(np.float64)
    work = w.astype(np.float64).copy()
    h = h.astype(np.float64).copy()
    d = h.shape[-1]
    at = np.arange(d)
    diag = h[:, at, at]
    dead = diag <= 0  # an input the samples never moved: rounded alone
    live_mean = np.where(dead, 0.0, diag).sum(axis=1) / np.maximum((~dead).sum(axis=1), 1)
    h[:, at, at] = np.where(dead, 1.0, diag) + DAMPING * np.where(live_mean > 0, live_mean, 1.0)[:, None]
    upper = np.linalg.cholesky(np.linalg.inv(h)).transpose(0, 2, 1)
    out = np.empty(w.shape, np.float64)
    for i1 in range(0, d, BLOCK):
        i2 = min(i1 + BLOCK, d)
        block, errors, u = work[:, :, i1:i2], np.zeros((w.shape[0], w.shape[1], i2 - i1)), upper[:, i1:i2, i1:i2]
        for i in range(i2 - i1):
            q = np.clip(np.rint(block[:, :, i] * scale), -127, 127)
            out[:, :, i1 + i] = q
            err = (block[:, :, i] - q / scale) / u[:, i, i][:, None]
            block[:, :, i:] -= err[:, :, None] * u[:, None, i, i:]
            errors[:, :, i] = err
        work[:, :, i2:] -= errors @ upper[:, i1:i2, i2:]
    return out.astype(np.int8)


def output_error(w: np.ndarray, q: np.ndarray, exps: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Each row's squared output error over the rows H summarises: (q 2**-e - w) H (q 2**-e - w)^T,
    shaped (groups, rows)."""
    delta = q.astype(np.float64) * 2.0 ** -exps[..., None].astype(np.float64) - w.astype(np.float64)
    return np.einsum("grd,gde,gre->gr", delta, h, delta)


def round_layer(w: np.ndarray, exps: np.ndarray, halves: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, which rows GPTQ rounded) of w (groups, rows, d): GPTQ on both halves' H for the rows
    where rounding on one half and measuring on the other (both ways) beat nearest rounding, nearest
    elsewhere.  The held-out check keeps GPTQ from fitting the samples' noise: on white-noise inputs
    the input patches are uncorrelated, and what it would spread errors along is chance."""
    a, b = halves
    nearest = np.clip(np.rint(w * 2.0 ** exps[..., None]), -127, 127).astype(np.int8)
    held_out = output_error(w, gptq_round(w, exps, a), exps, b) + output_error(w, gptq_round(w, exps, b), exps, a)
    better = held_out < output_error(w, nearest, exps, a + b)
    if not better.any():
        return nearest, better
    return np.where(better[..., None], gptq_round(w, exps, a + b), nearest), better


def plan_rounding(g: Graph, samples: list[dict[str, np.ndarray]], names,
                  exps_of: Callable[[np.ndarray], np.ndarray]
                  ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray], WeightRounding]:
    """GPTQ int8 weights for the conv/dense nodes `names` of the float graph g, at the exponents
    `exps_of(w)` gives (one per output channel): {node: (exponents, int8 weights)}; each such layer's
    mean output shift over its real input patches, for bias correction; and what was done.  Why the
    patches' mean and not each input channel's: GPTQ already takes out the mean error where the
    patches carry padding zeros and strides skip rows, and the per-channel estimate would put one back
    (the layers reading pooled values, squeeze-and-excitation and classifiers, showed it)."""
    wanted = set(names)
    nodes, summary = [], WeightRounding()
    for n in g.nodes:
        if n.name in wanted and has_const_weights(g, n):
            summary.layers += 1
            if _rows_per_sample(g, n) * len(samples) >= MIN_ROWS_PER_INPUT * _inputs_per_row(g, n):
                nodes.append(n)
            else:
                summary.few_rows.append(n.name)
    moments = input_moments(g, samples, nodes)
    done, shifts = {}, {}
    for n in nodes:
        w = g.consts[n.inputs[1]]
        groups = _groups(n)
        exps = np.broadcast_to(np.asarray(exps_of(w), np.int64), (w.shape[0],)).copy()
        rows = w.reshape(groups, w.shape[0] // groups, -1)
        try:
            *halves, mean_patch = moments[n.name]
            q, better = round_layer(rows, exps.reshape(groups, -1), tuple(halves))
        except (np.linalg.LinAlgError, KeyError):
            summary.few_rows.append(n.name)
            continue
        summary.considered += w.shape[0]
        if better.any():
            done[n.name] = (exps, q.reshape(w.shape))
            delta = q.astype(np.float64) * 2.0 ** -exps.reshape(groups, -1, 1) - rows
            shifts[n.name] = np.einsum("grd,gd->gr", delta, mean_patch).reshape(-1)
            summary.rounded.append(n.name)
            summary.channels += int(better.sum())
    return done, shifts, summary


def weight_rounding_stage(state: WeightState, mode: WeightRoundingMode) -> WeightState:
    """The WEIGHTS stage, last, on the final weights: GPTQ int8 weights (seeded into the rewrite's weight
    cache under ROUNDED_KEY), each rounded layer's measured output shift for the bias correction (made
    again), what was done recorded as a WeightRounding.  Only with power-of-two shifts and not for a QDQ
    model (module docstring)."""
    if mode is not WeightRoundingMode.GPTQ or state.options.requant is not RequantMode.POW2 or state.qdq:
        return state
    u = state.uncorrected
    names = [n.name for n in u.nodes if int8_rule(n.op) == "weights" and not n.attrs.get("keep_float")]
    rounded, found, rounding = plan_rounding(u, state.samples, names, state.weight_exponents)
    state = replace(state, shifts={**state.shifts, **found},
                    seeds={**state.seeds, **{(ROUNDED_KEY, name): r for name, r in rounded.items()}})
    if rounded and state.options.bias_correction:
        state = state.with_weights(u)
    return state.record("weight_rounding", rounding)


register(Technique("weight_rounding", Stage.WEIGHTS, weight_rounding_stage, QUANT_OPTIONS["weight_rounding"],
                   order=30, doc="int8 weights rounded for each layer's output on the calibration samples (GPTQ)"))
