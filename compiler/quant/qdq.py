"""Quantized models in: the scales of a QDQ / QLinear ONNX model become the int8 graph's exponents.

ONNX Runtime's quantizer (QuantFormat.QDQ) and PyTorch QAT export ship int8 weights behind a
DequantizeLinear and every quantized activation as a QuantizeLinear -> DequantizeLinear pair;
QLinearConv/QLinearMatMul carry the same scales as inputs.  The float graph the compiler works on
drops those pairs (`quantize.strip_fake_quant`), so the scales are read here first:

- an activation tensor t quantized by a pair with scale s and zero point 0 (int8, symmetric) gets
  the exponent e with 2**-e == s, replacing calibration for t (`Calibration.fixed`); calibration
  still runs for every other tensor;
- a constant weight dequantized with scale s (one, or one per output channel: axis 0 of a Conv or
  a Gemm with transB, the last axis of a MatMul) gives its node those exponents (per channel: the
  ALU SHR by a vector of `channel_scales`), matched by value, so a weight that folding changed
  (batch norm) keeps the compiler's own choice.

Without ALU MUL the hardware has power-of-two scales only.  A scale that is a power of two maps exactly
(the int8 values of the model are kept bit for bit); any other maps to the nearest power of two that
does not clip the model's range, 2**-e >= s, i.e. e = floor(-log2 s): its step is up to twice the
model's, and the notes list each such scale with the ratio.  With fixed-point multipliers (requant
"multiplier", fixed_point.py) a layer whose weight scales are not all powers of two keeps the model's
float scales exactly, so its int8 weights are the model's bit for bit; power-of-two ones keep the shift
(no MUL pass).  Activation scales stay powers of two either way.  Inputs the hardware cannot take
fall back to calibration with a note naming the node: a non-zero zero point (asymmetric, e.g.
ONNX Runtime's default uint8 activations), uint8 weights, an exponent outside `EXP_RANGE`.
A scale that is not a finite positive number is an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.quant.techniques import fixed_point
from vtakit.compiler.quant.techniques.channel_scales import CHANNEL_SPREAD, finest_allowed
from vtakit.compiler.ir import Graph
from vtakit.compiler.ops.quant import QDQ_WEIGHTS_NOTE
from vtakit.compiler.quant.quantize import EXP_RANGE, FLOAT_SCALE_KEY


@dataclass(frozen=True)
class Exponent:
    """A model scale as a power-of-two exponent: `ratio` = 2**-e / scale (1.0 when exact)."""

    exp: int
    ratio: float

    @property
    def exact(self) -> bool:
        return self.ratio == 1.0


def scale_exponent(scale: float, node: str, op: str) -> Exponent:
    """The exponent of one scale (see the module docstring); a bad scale is a CompileError."""
    if not (math.isfinite(scale) and scale > 0):
        raise CompileError(f"quantization scale {scale} is not a finite positive number", node=node, op=op)
    e = math.floor(-math.log2(scale))
    if 2.0 ** -(e + 1) >= scale:  # log2 rounding just below an exact power of two
        e += 1
    return Exponent(e, float(2.0 ** -e / scale))


@dataclass(frozen=True)
class QdqScales:
    """What a QDQ model says about the int8 graph: activation and weight exponents, and notes."""

    act: dict[str, int] = field(default_factory=dict)  # float tensor -> exponent
    weights: dict[tuple, np.ndarray] = field(default_factory=dict)  # _weight_key(float value) -> exps
    weight_scales: dict[tuple, np.ndarray] = field(default_factory=dict)  # the same keys -> float scales
    notes: list[str] = field(default_factory=list)  # one line per inexact scale or fallback
    inexact: dict[str, float] = field(default_factory=dict)  # tensor/weight -> worst step ratio

    def __bool__(self) -> bool:
        return bool(self.act or self.weights)

    def weight_exps(self, w: np.ndarray) -> np.ndarray | None:
        """The model's exponents for a weight array of the optimized graph (None: not from QDQ)."""
        return self.weights.get(_weight_key(w))

    def act_scale(self, t: str) -> float:
        """The model's scale of activation t (one of `act`'s tensors)."""
        return 2.0 ** -self.act[t] / self.inexact.get(t, 1.0)

    def float_weight_scales(self, w: np.ndarray) -> np.ndarray | None:
        """The model's float per-channel scales of a weight array where they are not all powers of two
        (what multipliers keep exactly); None otherwise."""
        key = _weight_key(w)
        s = self.weight_scales.get(key)
        if s is None or np.array_equal(s, 2.0 ** -self.weights[key].astype(np.float64)):
            return None
        return s


def _weight_key(w: np.ndarray) -> tuple:
    a = np.ascontiguousarray(w, np.float32)
    return a.shape, hash(a.tobytes())


def _in_range(e: int) -> bool:
    lo, hi = EXP_RANGE
    return lo <= e <= hi


def _channel_exponents(exps: list[Exponent], scale) -> tuple[np.ndarray, np.ndarray, float, int]:
    """A weight's per-channel exponents no finer than one vector SHR reaches from the coarsest
    (`channel_scales.finest_allowed`, as for the compiler's own) nor than the exponent range allows; its
    float scales with the coarsened channels at their power of two; the worst step ratio among the channels
    kept; how many were coarsened."""
    raw = np.array([x.exp for x in exps], np.int64)
    e = np.minimum(raw, min(finest_allowed(raw), EXP_RANGE[1]))
    kept = raw == e
    worst = max((x.ratio for x, k in zip(exps, kept) if k), default=1.0)
    return e, np.where(kept, np.asarray(scale, np.float64), 2.0 ** -e.astype(np.float64)), worst, int(np.sum(~kept))


def read_scales(graph: Graph) -> QdqScales:
    """The scales of every QuantizeLinear -> DequantizeLinear pair and dequantized weight of `graph`
    (the imported graph, before `strip_fake_quant`)."""
    out = QdqScales()
    prod = graph.producers()
    for n in graph.nodes:
        if n.op != "DequantizeLinear" or (p := prod.get(n.inputs[0])) is None or p.op != "QuantizeLinear":
            continue
        t, a = p.inputs[0], p.attrs
        if a["zero_point"] != 0 or a["dtype"] != "int8":
            out.notes.append(f"{t}: {p.name} quantizes to {a['dtype']} with zero point {a['zero_point']} "
                             "(the accelerator's int8 is symmetric, zero point 0): calibrated instead")
            continue
        ex = scale_exponent(a["scale"], p.name, p.op)
        if not _in_range(ex.exp):
            out.notes.append(f"{t}: {p.name} scale {a['scale']:.6g} is 2**{-ex.exp}, out of range: calibrated instead")
            continue
        if t in out.act and out.act[t] != ex.exp:  # two pairs on one tensor: the coarser scale clips neither
            ex = Exponent(min(out.act[t], ex.exp), max(ex.ratio, out.inexact.get(t, 1.0)))
        out.act[t] = ex.exp
        if not ex.exact:
            out.inexact[t] = max(ex.ratio, out.inexact.get(t, 1.0))
    for name, rec in graph.notes.get(QDQ_WEIGHTS_NOTE, {}).items():
        if name in graph.consts:
            _read_weight(out, name, graph.consts[name], rec)
    for t, r in sorted(out.inexact.items()):
        out.notes.append(f"{t}: scale is not a power of two; the step is {r:.3f}x the model's")
    return out


def _read_weight(out: QdqScales, name: str, w: np.ndarray, rec: dict) -> None:
    if rec["dtype"] == "int32":  # a bias (scale x_scale * w_scale): the compiler derives its own
        return
    if rec["dtype"] != "int8" or np.any(rec["zero_point"] != 0):
        out.notes.append(f"{rec['node']} dequantizes {rec['dtype']} with a non-zero zero point "
                         "(symmetric int8 weights needed): the compiler chooses its exponents")
        return
    exps = [scale_exponent(float(s), rec["node"], "DequantizeLinear") for s in rec["scale"]]
    if not _in_range(min(x.exp for x in exps)):
        out.notes.append(f"{rec['node']} has a scale out of range: the compiler chooses its exponents")
        return
    e, scale, worst, coarsened = _channel_exponents(exps, rec["scale"])
    if coarsened:  # near-silent channels (a folded batch norm's): the compiler's own exponents do the same
        out.notes.append(f"{rec['node']}: {coarsened} of {e.size} channels' scales are finer than "
                         f"2**-{int(e.max())} (a shift vector spans at most {CHANNEL_SPREAD} between channels): "
                         "their weights are rounded at that step")
    if worst != 1.0:
        out.inexact[rec["node"]] = worst
    if w.ndim < 1:
        return

    def keep(key: tuple, exps: np.ndarray, scales: np.ndarray) -> None:
        out.weights[key], out.weight_scales[key] = exps, scales

    if e.size == 1:  # per tensor: any orientation the optimizer gives it
        keep(_weight_key(w), np.full(w.shape[0], e[0], np.int64), np.full(w.shape[0], scale[0]))
        if w.ndim == 2:
            keep(_weight_key(w.T), np.full(w.shape[1], e[0], np.int64), np.full(w.shape[1], scale[0]))
        return
    if rec["axis"] == 0:
        keep(_weight_key(w), e, scale)
    elif w.ndim == 2 and rec["axis"] == 1:  # MatMul (in, out): Dense keeps (out, in)
        keep(_weight_key(w.T), e, scale)


def _exponent_of(scale: float, node: str) -> Exponent:
    """scale_exponent of a scale computed as 2**-e / ratio * factor: a hair above 2**-e reads as 2**-e."""
    ex = scale_exponent(scale * (1 - 1e-9), node, "QuantizeLinear")
    return Exponent(ex.exp, 1.0 if abs(ex.ratio - 1.0) < 1e-6 else ex.ratio)


def rescaled(scales: QdqScales, before: Graph, after: Graph, factors: dict[str, float]) -> QdqScales:
    """The model's scales for `after`, `before` range-scaled by `factors` (range_scale.plan_model_factors):
    an activation that holds f times its value has f times its scale (the model's own power of two where f
    is its ratio), and a weight divided by f_in and multiplied by f_out is recorded under its new value
    with its scales times f_out / f_in, so its int8 values stay the model's."""
    out = QdqScales(weights=dict(scales.weights), weight_scales=dict(scales.weight_scales),
                    notes=[n for n in scales.notes if "scale is not a power of two" not in n])
    for t in scales.act:
        ex = _exponent_of(scales.act_scale(t) * factors.get(t, 1.0), t)
        out.act[t] = ex.exp
        if not ex.exact:
            out.inexact[t] = ex.ratio
    for n in after.nodes:  # a scaled graph input: its readers take the host Mul's output (range_scale._scale_inputs)
        if n.inputs and n.inputs[0] in after.inputs and n.inputs[0] in out.act and n.outputs[0] not in before.tensors:
            out.act[n.outputs[0]] = out.act[n.inputs[0]]
    new = {n.name: n for n in after.nodes}
    for n in before.nodes:
        m = new.get(n.name)
        if m is None or len(n.inputs) < 2 or m.inputs[1] == n.inputs[1] or n.inputs[1] not in before.consts:
            continue
        key = _weight_key(before.consts[n.inputs[1]])
        if key not in scales.weights:
            continue
        r = factors.get(n.outputs[0], 1.0) / factors.get(n.inputs[0], 1.0)
        scale = scales.weight_scales[key] * r  # channel roundings may part by one more than the spread: limited again
        e, scale, worst, _ = _channel_exponents([_exponent_of(float(v), n.name) for v in scale], scale)
        new_key = _weight_key(after.consts[m.inputs[1]])
        out.weights[new_key], out.weight_scales[new_key] = e, scale
        if worst != 1.0:
            out.inexact[n.name] = worst
    for t, r in sorted(out.inexact.items()):
        out.notes.append(f"{t}: scale is not a power of two; the step is {r:.3f}x the model's")
    exact = sum(1 for t in scales.inexact if t in scales.act and t not in out.inexact)
    if exact:
        out.notes.append(f"{exact} activation scales that are not powers of two kept exactly by range scaling")
    return out


def weight_roundtrip(scales: QdqScales, fallback, float_scales: bool = False):
    """The bias-correction roundtrip: a QDQ weight at its own exponents (with `float_scales`, multipliers:
    at its own float scales where they are not powers of two), others by `fallback`."""

    def roundtrip(w: np.ndarray) -> np.ndarray:
        e = scales.weight_exps(w)
        if e is None:
            return fallback(w)
        s = scales.float_weight_scales(w) if float_scales else None
        if s is not None:
            return fixed_point.weight_roundtrip(w, s)
        e = e.reshape((-1,) + (1,) * (w.ndim - 1)).astype(np.float64)
        return np.clip(np.rint(w.astype(np.float64) * 2.0 ** e), -127, 127) * 2.0 ** -e

    return roundtrip


def seed_weight_cache(g: Graph, scales: QdqScales, cache: dict, weight_nodes,
                      float_scales: bool = False) -> tuple[list[str], list[str]]:
    """Put the model's weight exponents where `quantize` looks first (its weight cache, keyed by
    node), and with `float_scales` (multipliers) the float scales that are not powers of
    two; returns (the nodes keeping power-of-two exponents, the nodes keeping float scales)."""
    pow2, floats = [], []
    for n in weight_nodes:
        w = g.consts[n.inputs[1]]
        e = scales.weight_exps(w)
        if e is None:
            continue
        cache[n.name] = e
        s = scales.float_weight_scales(w) if float_scales else None
        if s is not None:
            cache[(FLOAT_SCALE_KEY, n.name)] = s
            floats.append(n.name)
        else:
            pow2.append(n.name)
    return pow2, floats


def compile_notes(scales: QdqScales, q: Graph, weight_nodes: list[str], float_nodes: list[str] = ()) -> dict:
    """What the compile report says: how many scales were kept, which moved and why (`float_nodes`: the
    layers whose weights kept the model's float scales with multipliers)."""
    moved = [f"weights of {', '.join(float_nodes)} at the model's own float scales (multipliers)"] if float_nodes else []
    for t, e in sorted(scales.act.items()):
        info = q.tensors.get(f"{t}.q")
        if info is not None and info.exp is not None and info.exp != e:
            moved.append(f"{t}: model 2**{-e}, compiled 2**{-info.exp} (shared with a scale-preserving op "
                         "or lowered so no shift is negative)")
    inexact_weights = [k for k in scales.inexact if k not in scales.act]
    # with multipliers every inexact weight scale is kept as a float (float_nodes non-empty then)
    exact = not any(k in scales.act for k in scales.inexact) and (not inexact_weights or bool(float_nodes))
    return dict(activations=len(scales.act), weights=list(weight_nodes), exact=exact,
                notes=list(scales.notes) + moved)
