"""Activation scales between powers of two, by rescaling the float graph before quantization.

int8 activations have power-of-two scales (requantization is a shift; `quantize`), so a tensor whose
largest |value| maps to 70 of the 127 int8 levels wastes most of a bit, and over a deep network those
losses compound (on EfficientNet-Lite0 float per-tensor scales would lift the logits cosine
from 0.980 to 0.995).  Rescaling keeps the power-of-two machinery and moves the tensor instead: where a
tensor t is written only by convs/dense (or by scale-commuting ops from such tensors) and read only as
the data input of convs/dense, multiplying the producers' weights, bias and activation bounds by
alpha and dividing the readers' weights by alpha leaves the float network unchanged, and alpha * t fills
the int8 range at its power-of-two exponent: in effect a float scale 2**-e / alpha.  Weights keep
their own scales (float per channel with multipliers, where a factor on a whole weight tensor changes
nothing; power-of-two per channel otherwise, re-rounded).

Which tensors share a factor (`factor_groups`): the inputs and output of an op that commutes with a
positive factor (the precision-neutral ops, `ops.keeps_scale`: ReLU, max pooling, layout ops,
Concat, Pad and Clip with their constants scaled; Add, whose inputs and output then carry one factor;
average pooling).  A group is scalable only where every tensor is made by a conv/dense or such an op
(or is a float graph input) and read only by such ops or as a conv/dense's data input, and none is a
graph output (the user's values) or a constant.  A scaled graph input is multiplied by its factor on the
host, a float Mul before the Quantize the host runs anyway (`_scale_inputs`): a photo normalized to
[-1, 1] or mean-subtracted to [-123, 151] otherwise lands on half the int8 levels, a bit of the
picture lost before the first layer (EfficientNet-Lite0's logits cosine 0.991 -> 0.995 in a
fake-quantized emulation).  A group spans one or more exponent groups (`quantize.exponent_groups`;
a residual stream's adds chain them): its factor is the one, among each exponent group's ideal, with
the least summed relative rounding error over them (`best_factor`).  With power-of-two weights, groups a
layer with one weight exponent for all channels writes or reads stay unscaled (`_per_channel_only`), and
after the bias correction is made again factors that overshoot their range shrink (`scale_and_correct`).
A QDQ model keeps its own scales instead: `plan_model_factors` picks the factors that land its tensors on
the model's grid (qdq.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from vtakit.compiler.quant.techniques.equalize import has_const_weights
from vtakit.compiler.ops import keeps_scale
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.quant.precision import precision_plan
from vtakit.compiler.quant.quantize import INT8_REACH, _Groups, exponent_groups, ideal_exponent, one_shift
from vtakit.compiler.quant import qdq
from vtakit.compiler.options import QUANT_OPTIONS, RangeScaleMode, RequantMode
from vtakit.compiler.quant.techniques.registry import Stage, Technique, WeightState, register

SCALE_LINEAR = frozenset({"Add", "AveragePool", "GlobalAveragePool"})


def scales_linearly(op: str) -> bool:
    """Whether an op's output scales with one factor on all its activation inputs: the precision-neutral
    ops and the sums and averages."""
    return keeps_scale(op) or op in SCALE_LINEAR
"""Ops whose output carries its inputs' factor: every input and the output in one factor group."""
MARGIN = 1 - 2 ** -10
"""A factor stops this far below the int8 range's edge: calibration's float rounding must not tip a tensor
into the next coarser exponent (a whole bit lost)."""
SETTLE_ROUNDS = 4
"""How often `scale_and_correct` shrinks factors whose tensors grew past their exponent's range when the bias
correction was made again for the scaled weights (power-of-two weights are re-rounded)."""
SETTLE_MARGIN = 1 - 2 ** -6
"""A factor shrunk for an overshoot stops this far below the range: re-rounding power-of-two weights moves the
correction by a few tenths of a percent each time."""


@dataclass(frozen=True)
class RangeScaling:
    """What `plan_factors` chose: the factor of each scaled group (named by its first tensor)."""

    factors: dict[str, float]
    groups: int          # factor groups holding int8 tensors
    fixed: int           # of those, the ones that cannot be scaled (a graph input/output, a float reader, ...)
    mean_fill_before: float  # mean over int8 tensors of amax * 2**e / 127 (1: the int8 range filled)
    mean_fill_after: float


def factor_groups(g: Graph) -> _Groups:
    """Tensors that must carry one factor: the activation inputs and output of every `scales_linearly` node."""
    groups = _Groups()
    for n in g.nodes:
        if scales_linearly(n.op):
            for t in n.inputs:
                if t and not g.is_const(t):
                    groups.union(t, n.outputs[0])
    return groups


def _scalable(g: Graph, groups: _Groups) -> dict[str, bool]:
    """Group root -> whether a factor on it can be absorbed by its producers and readers exactly."""
    ok: dict[str, bool] = {}
    producers, readers = g.producers(), g.consumers()
    tensors = set(g.tensors) - set(g.consts)
    for t in tensors:
        root = groups.find(t)
        p = producers.get(t)
        made_here = p is not None and (has_const_weights(g, p) or scales_linearly(p.op))
        user_input = t in g.inputs and g.tensors[t].dtype == "float32"  # scaled by a Mul on the host (_apply)
        good = t not in g.outputs and (made_here or user_input) \
            and all(scales_linearly(r.op) or (has_const_weights(g, r) and r.inputs[0] == t and t not in r.inputs[1:])
                    for r in readers.get(t, []))
        if p is not None and p.op in ("Add", "Concat") and any(i and g.is_const(i) for i in p.inputs):
            good = False  # a constant operand would need the factor too
        ok[root] = ok.get(root, True) and good
    return ok


def _fill(amax: float, alpha: float) -> float:
    """amax * alpha * 2**e / 127 at the exponent calibration "max" gives alpha * amax: in (0.5, 1]."""
    v = amax * alpha
    return v * 2.0 ** ideal_exponent(v) / 127.0 if v > 0 else 1.0


def best_factor(amaxes: list[float], weights: list[float]) -> float:
    """alpha in [1, 2) minimizing sum(weight / fill(amax * alpha)**2) (rounding error relative to range),
    among each amax's own ideal factor (any alpha is one of those or worse for every amax)."""
    live = [(a, w) for a, w in zip(amaxes, weights) if a > 0]
    if not live:
        return 1.0
    candidates = {1.0}
    for a, _ in live:
        f = 127.0 * 2.0 ** -ideal_exponent(a) / a  # in [1, 2) unless the exponent range clamps
        if 1.0 <= f < 2.0:
            candidates.add(f * MARGIN)
    return min(sorted(candidates), key=lambda f: sum(w / _fill(a, f) ** 2 for a, w in live))


def observe_amax(g: Graph, samples: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Largest |value| of every float tensor over the samples."""
    amax: dict[str, float] = {}

    def observe(name: str, value: np.ndarray) -> None:
        if value.dtype == np.float32 and value.size:
            amax[name] = max(amax.get(name, 0.0), float(np.max(np.abs(value))))

    for feeds in samples:
        for name, v in feeds.items():
            observe(name, np.asarray(v, np.float32))
        run_graph(g, feeds, observer=observe)
    return amax


def _int8_tensors(g: Graph):
    """(precision plan, exponent groups, int8 tensors, the int32 accumulators among them: no int8 range to
    fill) of `g`."""
    plan = precision_plan(g)
    exp_groups, int8_tensors = exponent_groups(g, [n for n in g.nodes if n.name in plan.int8])
    return plan, exp_groups, int8_tensors, {n.outputs[0] for n in g.nodes if n.name in plan.wide}


def plan_factors(g: Graph, amax: dict[str, float],
                 one_shift: Callable[[np.ndarray], bool] | None = None) -> tuple[dict[str, float], RangeScaling]:
    """The factor of every tensor to scale (see the docstring) and a summary; `amax`: each tensor's largest
    |value| on the calibration samples (`observe_amax`); `one_shift(w)`: whether weights w requantize with
    one shift for all output channels (power-of-two weights; `_per_channel_only`)."""
    plan, exp_groups, int8_tensors, wide = _int8_tensors(g)
    int8_tensors = {t for t in int8_tensors if t in amax and t not in wide and amax[t] <= INT8_REACH}  # a mask stays float
    groups = factor_groups(g)
    scalable = _scalable(g, groups)
    members: dict[str, dict[str, list[str]]] = {}  # factor group -> exponent group -> int8 tensors
    for t in sorted(int8_tensors):
        members.setdefault(groups.find(t), {}).setdefault(exp_groups.find(t), []).append(t)
    if one_shift is not None:
        scalable = _per_channel_only(g, groups, scalable, one_shift, plan)
    by_root: dict[str, float] = {}
    for root, by_exp in members.items():
        if scalable.get(root, False):
            f = best_factor([max(amax[t] for t in ts) for ts in by_exp.values()], [len(ts) for ts in by_exp.values()])
            if f != 1.0:
                by_root[root] = f
    factors = {t: by_root[groups.find(t)] for t in g.tensors if groups.find(t) in by_root and not g.is_const(t)}
    names = {root: min(t for ts in members[root].values() for t in ts) for root in by_root}
    fills = [(_fill(amax[t], 1.0), _fill(amax[t], factors.get(t, 1.0))) for t in int8_tensors]
    before, after = (float(np.mean(v)) if v else 1.0 for v in zip(*fills)) if fills else (1.0, 1.0)
    return factors, RangeScaling({names[r]: f for r, f in by_root.items()}, len(members),
                                 sum(not scalable.get(r, False) for r in members), before, after)


def plan_model_factors(g: Graph, ratios: dict[str, float]) -> dict[str, float]:
    """A QDQ model's activation scales on power-of-two hardware: tensor t of scale s, held at exponent e
    with 2**-e = s * ratio (ratio in [1, 2), `qdq.Exponent`), lands on the model's own grid when it holds
    ratio times its value.  Returns the factor of every tensor to scale: per scalable factor group, the
    ratio most of its tensors with a scale have (an add ties tensors the model scaled apart; the others
    keep a step up to 2x the model's, as without scaling)."""
    groups = factor_groups(g)
    scalable = _scalable(g, groups)
    seen: dict[str, list[float]] = {}
    for t, r in sorted(ratios.items()):
        if t in g.tensors:
            seen.setdefault(groups.find(t), []).append(r)
    chosen = {}
    for root, rs in seen.items():
        f = max(rs, key=rs.count)
        if scalable.get(root, False) and f != 1.0:
            chosen[root] = f
    return {t: chosen[groups.find(t)] for t in g.tensors if groups.find(t) in chosen and not g.is_const(t)}


def _per_channel_only(g: Graph, groups: _Groups, scalable: dict[str, bool], one_shift: Callable[[np.ndarray], bool],
                      plan) -> dict[str, bool]:
    """`scalable` without the groups that a conv/dense with one weight exponent for all its channels writes
    or reads (power-of-two weights).  Why: such a layer's weights move by the factor as a whole, so the
    precision the activations gain its weights lose (the fill of one power-of-two range traded for another),
    and a factor that moves its channels' maxima across powers of two unevenly gives it a per-channel
    shift vector, an ALU pass with a tensor operand: 2 cycles per output entry.  The seeded ResNet-18
    with a centred classifier, whose random weights are alike across channels, loses cosine (0.985 ->
    0.980) and the demo ResNet-18 0.4 % of its cycles without this rule.  Per-channel exponents round each
    channel's scaled maximum afresh, so their layers lose nothing on average."""
    scalable = dict(scalable)
    for n in g.nodes:
        if not has_const_weights(g, n):
            continue
        per_channel = n.name in plan.int8 and n.name not in plan.wide and not one_shift(g.consts[n.inputs[1]])
        if not per_channel:
            for t in (n.inputs[0], n.outputs[0]):
                scalable[groups.find(t)] = False
    return scalable


def apply_factors(graph: Graph, factors: dict[str, float]) -> Graph:
    """A copy of the graph in which every tensor t holds factors.get(t, 1) times its old value: the
    producers' weights, bias and bounds scaled, the readers' weights divided (the float function kept)."""
    g = graph.copy()
    _apply(g, lambda t: factors.get(t, 1.0) if t else 1.0)
    return g


def _apply(g: Graph, factor) -> None:
    """Rewrite `g` in place so that every tensor t holds factor(t) times its old value (the same constant
    names on every graph it is applied to: compile_module's corrected and uncorrected graphs pair nodes by them)."""
    factor = _scale_inputs(g, factor)
    for n in g.nodes:
        f_out = factor(n.outputs[0])
        if has_const_weights(g, n):
            f_in = factor(n.inputs[0])
            if f_out == 1.0 and f_in == 1.0:
                continue
            w = g.consts[n.inputs[1]]
            n.inputs[1] = g.add_const(f"{n.name}.weight_rs", (w.astype(np.float64) * (f_out / f_in)).astype(w.dtype))
            if len(n.inputs) > 2 and n.inputs[2]:
                b = g.consts[n.inputs[2]]
                n.inputs[2] = g.add_const(f"{n.name}.bias_rs", (b.astype(np.float64) * f_out).astype(b.dtype))
        elif f_out == 1.0:
            continue
        if "act" in n.attrs:
            lo, hi = n.attrs["act"]
            n.attrs["act"] = (lo * f_out, hi * f_out)
        if n.op == "Clip":
            n.attrs["lo"], n.attrs["hi"] = n.attrs["lo"] * f_out, n.attrs["hi"] * f_out
        elif n.op == "Pad" and n.attrs.get("value"):
            n.attrs["value"] = float(n.attrs["value"]) * f_out
    g.prune()
    g.validate()


def _scale_inputs(g: Graph, factor):
    """A scaled graph input keeps the user's values: a float Mul by its factor (run on the host, where the
    input is quantized anyway) writes the scaled tensor its readers now take.  Returns `factor` for the
    rewritten graph (the Mul's output carries the input's factor, the input itself none)."""
    moved: dict[str, float] = {}
    for t in g.inputs:
        f = float(np.float32(factor(t)))  # the Mul multiplies by this float32 value; readers divide by it
        if f == 1.0:
            continue
        scaled = g.fresh_name(f"{t}.range_scaled")
        g.replace_uses(t, scaled)
        g.tensors[scaled] = g.tensors[t]
        alpha = g.add_const(f"{t}.range_factor", np.array(f, np.float32))
        g.nodes.insert(0, Node("Mul", g.fresh_name(f"{t}.range_scale"), [t, alpha], [scaled]))
        moved[t], moved[scaled] = 1.0, f
    return (lambda t: moved[t] if t in moved else factor(t)) if moved else factor


def scale_and_correct(uncorrected: Graph, corrected: Graph, samples: list[dict[str, np.ndarray]],
                      correct: Callable[[Graph], Graph] | None,
                      one_shift: Callable[[np.ndarray], bool] | None = None) -> tuple[Graph, Graph, RangeScaling]:
    """(uncorrected, corrected) graphs range-scaled, the factors planned on `corrected`'s values (the ones
    calibration sees).  `correct` makes the bias correction again for the scaled weights (None: no bias
    correction, `corrected` is `uncorrected`).  With float weight scales the new correction is the old one
    scaled; with power-of-two weights it differs a little and may push a tensor past the range its factor
    aimed at (a whole bit lost): such groups' factors shrink by the overshoot, up to SETTLE_ROUNDS times.
    `one_shift`: as `plan_factors`."""
    # No int8 tensor (an all-float graph): the plan reads no amax, so the graph need not run (a huge all-float chain compiles fast)
    _, _, int8_tensors, wide = _int8_tensors(corrected)
    amax = observe_amax(corrected, samples) if int8_tensors - wide else {}
    factors, summary = plan_factors(corrected, amax, one_shift)
    if correct is None:
        return apply_factors(uncorrected, factors), apply_factors(corrected, factors), summary
    limit = {t: 127.0 * 2.0 ** -ideal_exponent(amax[t] * f) for t, f in factors.items() if amax.get(t, 0) > 0}
    groups = factor_groups(corrected)
    for settle in range(SETTLE_ROUNDS + 1):
        scaled = apply_factors(uncorrected, factors)
        g = correct(scaled)
        if settle == SETTLE_ROUNDS or not limit:  # no factor to settle: a run would find nothing to shrink
            break
        now = observe_amax(g, samples)
        shrink: dict[str, float] = {}
        for t, bound in limit.items():
            if now.get(t, 0.0) > bound:
                root = groups.find(t)
                shrink[root] = min(shrink.get(root, 1.0), bound / now[t] * SETTLE_MARGIN)
        if not shrink:
            break
        factors = {t: f * shrink.get(groups.find(t), 1.0) for t, f in factors.items()}
    return scaled, g, replace(summary, factors={k: factors[k] for k in summary.factors})


def range_scale_stage(state: WeightState, mode: RangeScaleMode) -> WeightState:
    """The WEIGHTS stage: the graph range-scaled (recorded as a RangeScaling), or a QDQ model's scales that
    are not powers of two met exactly (recorded as {tensor: factor}, where any of the model's activations
    moved; not with equalization, which leaves the model's scales unused)."""
    if mode is not RangeScaleMode.ON:
        return state
    o = state.options
    if not state.qdq:
        uncorrected, g, scaling = scale_and_correct(state.uncorrected, state.graph, state.samples,
                                                    state.corrected if o.bias_correction else None,
                                                    one_shift if o.requant is RequantMode.POW2 else None)
        return replace(state, uncorrected=uncorrected, graph=g).record("range_scale", scaling)
    if o.equalize != "off" or not state.qdq.act:
        return state
    u = state.uncorrected
    factors = plan_model_factors(u, {t: state.qdq.inexact.get(t, 1.0) for t in state.qdq.act})
    if not factors:
        return state
    scaled = apply_factors(u, factors)
    scales = qdq.rescaled(state.qdq, u, scaled, factors)
    scaled.notes["qdq"] = scales
    state = state.with_weights(scaled, qdq=scales)
    moved = {t: f for t, f in sorted(factors.items()) if t in scales.act}
    return state.record("range_scale", moved) if moved else state


register(Technique("range_scale", Stage.WEIGHTS, range_scale_stage, QUANT_OPTIONS["range_scale"], order=10,
                   doc="activation groups rescaled so each fills the int8 range at its power-of-two exponent"))
