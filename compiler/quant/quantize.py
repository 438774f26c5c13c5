"""int8 quantization with power-of-two scales, calibrated on sample inputs.

Where a tensor becomes int8 is the precision rule (`precision.py`).

Every int8 tensor t stores round(value * 2**e_t).  Power-of-two scales make
requantization an arithmetic shift and a clip, which the accelerator's ALU does
in the GEMM task's epilogue:

    conv/dense:  acc = x_q * w_q + bias_q       (scale 2**-(e_x + e_w); bias_q carries the
                 y_q = clip(acc >> (e_x + e_w - e_y), lo_q, hi_q)    rounding half-LSB of the shift)
    residual add: both inputs share e_in;  y_q = clip((a_q + b_q) >> (e_in - e_y))
                  (a conv whose only reader is the add keeps k extra bits instead: wide_residual.py)

Weights get one exponent per output channel (`channel_scales`), so the shift of a conv/dense is
per channel too (a tuple attribute; one int when every channel agrees): on the accelerator an ALU
SHR by a vector in the accumulator buffer, on the host an epilogue after the int32 kernel.  A
conv/dense that keeps its int32 accumulator keeps one weight exponent per tensor.

Exponents come from calibration (per tensor, the power of two with the least
squared error over the samples), then precision-neutral ops, which cannot
rescale, and the two inputs of an add are unioned into groups that share one
exponent, the coarsest of their members.  A conv or add whose output group would
need a left shift (judged by its coarsest weight channel) lowers that group's exponent until every
shift is >= 0.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.quant.techniques.channel_scales import channel_attr, fit_bias, weight_exps
from vtakit.compiler.quant.techniques import fixed_point
from vtakit.compiler.ops.execute import check_feeds, run_graph
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops import int8_rule, keeps_scale, op_def
from vtakit.compiler.quant.precision import precision_plan
from vtakit.compiler.passes.simplify import eliminate_dead_code
from vtakit.compiler.quant.techniques.weight_rounding import ROUNDED_KEY
from vtakit.compiler.quant.techniques.wide_residual import reader_output, wide_pairs, widen

EXP_RANGE = (-16, 30)
FLOAT_SCALE_KEY = "qdq_scale"
"""Weight cache key (FLOAT_SCALE_KEY, node): a QDQ model's float weight scales kept with multipliers (quant/qdq.py)."""
REQUANT_NOTE = "requant"
"""The graph note naming the conv/dense requantization scheme `quantize` applies ("pow2", "multiplier")."""
POW2_NODES_NOTE = "pow2_nodes"
"""The graph note naming conv/dense nodes that keep power-of-two weight exponents under "multiplier": a QDQ
model's, whose own scales `qdq.seed_weight_cache` put in the weight cache."""


@dataclass
class Calibration:
    """Largest |value| of every float tensor over the samples, and how many samples there were."""

    amax: dict[str, float] = field(default_factory=dict)
    sse: dict[str, dict[int, float]] = field(default_factory=dict)  # tensor -> exponent -> squared error
    samples: int = 0
    synthetic: bool = False
    fixed: dict[str, int] = field(default_factory=dict)  # tensor -> exponent a QDQ model gives (qdq.py)

    def observe(self, name: str, value: np.ndarray) -> None:
        amax = finite_or_inf(float(np.max(np.abs(value))))
        self.amax[name] = max(self.amax.get(name, 0.0), amax)
        if amax > INT8_REACH:  # an additive mask's -1e9 or -inf: no exponent holds it (`unrepresentable`)
            return
        errors = {e: quantization_error(value, e) for e in candidate_exponents(amax)}
        if name in self.sse:  # keep the exponents every sample could judge
            errors = {e: self.sse[name][e] + err for e, err in errors.items() if e in self.sse[name]}
        self.sse[name] = errors

    def exponent(self, name: str) -> int:
        """The power-of-two scale with the least squared error over the samples (clipping the
        rare largest values often buys a bit of resolution for all the others)."""
        if name in self.fixed:
            return self.fixed[name]
        check_reach(name, self.amax[name])
        errors = self.sse.get(name)
        if not errors:
            return ideal_exponent(self.amax[name])
        return min(errors, key=lambda e: (errors[e], e))


def strip_fake_quant(graph: Graph) -> Graph:
    """QuantizeLinear -> DequantizeLinear pairs (QDQ models, QLinear* ops) are float identities here:
    the compiler re-quantizes with its own power-of-two scales."""
    g = graph.copy()
    prod = g.producers()
    renames: dict[str, str] = {}  # dequantized tensor -> the float tensor it stands for
    for n in g.nodes:
        if n.op == "DequantizeLinear" and (p := prod.get(n.inputs[0])) is not None and p.op == "QuantizeLinear":
            if n.outputs[0] in g.outputs:  # a graph output keeps its name
                n.op, n.inputs, n.attrs = "Identity", [p.inputs[0]], {}
            else:
                renames[n.outputs[0]] = p.inputs[0]
    g.nodes = [n for n in g.nodes if n.outputs[0] not in renames]
    g.rename_uses(renames)  # one walk, not one per pair (quadratic in a QDQ model's size)
    return eliminate_dead_code(g)


def calibrate(graph: Graph, samples: list[dict[str, np.ndarray]], cal: Calibration | None = None) -> Calibration:
    """Observe every float tensor of the graph over the samples, into `cal` (a new Calibration by default)."""
    cal = Calibration() if cal is None else cal
    cal.samples = len(samples)

    def observe(name: str, value: np.ndarray) -> None:
        if value.dtype == np.float32 and value.size:
            cal.observe(name, value)

    for i, feeds in enumerate(samples):
        try:
            feeds = check_feeds(graph, feeds)
        except CompileError as e:
            raise CompileError(f"calibration sample {i}: {e}") from None
        for name, v in feeds.items():
            observe(name, v)
        run_graph(graph, feeds, observer=observe)
    return cal


INT8_REACH = 127.0 * 2.0 ** -EXP_RANGE[0]
"""The largest |value| an int8 tensor holds at the coarsest exponent; a tensor beyond it (an additive attention
mask of -1e9, finfo.min or -inf) stays float (`unrepresentable`)."""


def finite_or_inf(amax: float) -> float:
    """A largest |value| as calibration keeps it: NaN counts as infinite (max() would drop a NaN)."""
    return amax if math.isfinite(amax) else math.inf


def unrepresentable(amax: dict[str, float]) -> set[str]:
    """The calibrated tensors no int8 exponent can hold: non-finite, or beyond `INT8_REACH`."""
    return {t for t, a in amax.items() if not a <= INT8_REACH}


def check_reach(name: str, amax: float) -> None:
    """One error naming the tensor when int8 is asked of one `unrepresentable` holds (the quantizer keeps its
    readers and its producer float, so only a model whose int8 is fixed, a QDQ one, can get here)."""
    if not amax <= INT8_REACH:
        raise CompileError(f"tensor {name!r} reaches {amax:g} on the calibration samples, beyond any int8 scale "
                           f"(an additive mask?): keep the nodes that read it in float (keep_float)")


def ideal_exponent(amax: float) -> int:
    """The finest e with amax * 2**e <= 127."""
    if not np.isfinite(amax):
        raise CompileError(f"calibration saw a non-finite value ({amax})")
    if amax <= 0:
        return EXP_RANGE[1] // 2
    return int(min(max(math.floor(math.log2(127.0 / amax)), EXP_RANGE[0]), EXP_RANGE[1]))


def candidate_exponents(amax: float) -> range:
    """From the exponent that clips nothing to three bits finer."""
    e = ideal_exponent(amax)
    return range(e, min(e + 4, EXP_RANGE[1] + 1))


def quantization_error(value: np.ndarray, e: int) -> float:
    scale = np.float32(2.0 ** e)
    q = np.clip(np.rint(value * scale), -128, 127)
    return float(np.sum(np.square(q / scale - value), dtype=np.float64))


class _Groups:
    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, t: str) -> str:
        self.parent.setdefault(t, t)
        while self.parent[t] != t:
            self.parent[t] = self.parent[self.parent[t]]
            t = self.parent[t]
        return t

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def exponent_groups(g: Graph, int8_nodes: list[Node], wide: dict[str, str] | None = None) -> tuple[_Groups, set[str]]:
    """The int8 tensors and their union into groups that must share one exponent (the inputs and
    output of a precision-neutral op, the two inputs of an add); `wide` (conv output -> skip,
    `wide_residual.wide_pairs`): those conv outputs are no int8 tensor and join no group."""
    wide = wide or {}
    groups = _Groups()
    tensors: set[str] = set()
    for n in int8_nodes:
        acts = [i for i in n.inputs if i and not g.is_const(i)]
        tensors.update(t for t in acts + n.outputs if t not in wide)
        if keeps_scale(n.op):
            for i in acts:
                groups.union(i, n.outputs[0])
        elif int8_rule(n.op) == "sum" and not any(i in wide for i in acts):
            groups.union(acts[0], acts[1])
    return groups, tensors


def assign_exponents(g: Graph, cal: Calibration, int8_nodes: list[Node],
                     weight_exp: dict[str, int], wide: dict[str, str] | None = None) -> dict[str, int]:
    """An exponent per int8 tensor, consistent across scale-preserving ops, with every shift >= 0; a
    wide conv's output (`wide`: -> its skip) takes its skip's exponent, which its shift bounds."""
    wide = wide or {}
    groups, tensors = exponent_groups(g, int8_nodes, wide)
    missing = sorted(t for t in tensors if t not in cal.amax)
    if missing:
        raise CompileError(f"calibration saw no values for {missing[:4]}")
    exp: dict[str, int] = {}
    for t in tensors:
        root = groups.find(t)
        exp[root] = min(exp.get(root, EXP_RANGE[1]), cal.exponent(t))
    for _ in range(len(int8_nodes) + 1):  # lower groups until no conv/add needs a left shift
        changed = False
        for n in int8_nodes:
            out = groups.find(wide.get(n.outputs[0], n.outputs[0]))
            if int8_rule(n.op) == "weights":
                limit = exp[groups.find(n.inputs[0])] + weight_exp[n.name]
            elif int8_rule(n.op) == "sum":
                limit = exp[groups.find(wide.get(n.inputs[0], n.inputs[0]))]
            elif int8_rule(n.op) == "product":  # int8 x int8: the product's exponent is the sum
                limit = exp[groups.find(n.inputs[0])] + exp[groups.find(n.inputs[1])]
            else:
                continue
            if exp[out] > limit:
                exp[out], changed = limit, True
        if not changed:
            break
    return {t: exp[groups.find(wide.get(t, t))] for t in tensors | set(wide)}


def _weight_error(w: np.ndarray, e: int) -> float:
    """Squared error of w quantized to the symmetric range -127..127 at exponent e."""
    limit = 127 * 2.0 ** -e
    clipped = np.clip(w, -limit, limit)
    return quantization_error(clipped, e) + float(np.sum(np.square(w - clipped)))


def _weight_exp(w: np.ndarray) -> int:
    """Weights get the least-squared-error exponent too (symmetric range: -127..127)."""
    return min(candidate_exponents(float(np.max(np.abs(w)))), key=lambda e: (_weight_error(w, e), e))


_EXPONENTS: dict[tuple, np.ndarray] = {}
"""weight_exponents' results by the weights' bytes: bias correction, range scaling and every recipe the
auto search tries (recipe_search.py) ask again for the same weights, and the exponent search is most of the cost."""
_EXPONENTS_KEPT = 4096


def weight_exponents(w: np.ndarray) -> np.ndarray:
    """One exponent per output channel where that pays (`channel_scales.weight_exps`).  A conv/dense that
    keeps its int32 accumulator takes them too: the host's Dequantize scales its channels apart."""
    key = _bytes_key(w)
    exps = _EXPONENTS.get(key)
    if exps is None:
        exps = weight_exps(w, _weight_exp, ideal_exponent, EXP_RANGE[1])
        if len(_EXPONENTS) >= _EXPONENTS_KEPT:
            _EXPONENTS.pop(next(iter(_EXPONENTS)))
        _EXPONENTS[key] = exps
    return exps.copy()


def one_shift(w: np.ndarray) -> bool:
    """Whether power-of-two weights w requantize with one shift for all output channels (no shift vector)."""
    e = weight_exponents(w)
    return bool(np.all(e == e[0]))


def weight_roundtrip(w: np.ndarray, requant: str = "pow2") -> np.ndarray:
    """The float value of `w` after this module's weight quantization (what bias correction compares):
    per output channel where the quantizer would choose that (an int8 result); float per-channel
    scales with requant "multiplier" (fixed_point.py)."""
    if requant == "multiplier":
        return fixed_point.weight_roundtrip(w)
    e = weight_exponents(w).reshape((-1,) + (1,) * (w.ndim - 1))
    return _q(w, e, -127, 127, np.int32).astype(np.float64) * 2.0 ** -e


def graph_roundtrip(g: Graph, requant: str):
    """`weight_roundtrip` as `quantize` will treat each weight of `g`: with multipliers, a conv/dense that
    keeps its int32 accumulator still gets power-of-two exponents (recognized by its weights' bytes)."""
    if requant != "multiplier":
        return weight_roundtrip
    plan = precision_plan(g)
    wide = {_bytes_key(g.consts[n.inputs[1]]) for n in g.nodes if n.name in plan.wide and g.is_const(n.inputs[1])}

    def roundtrip(w: np.ndarray) -> np.ndarray:
        return weight_roundtrip(w, "pow2" if _bytes_key(w) in wide else requant)

    return roundtrip


def _bytes_key(w: np.ndarray) -> tuple:
    """A key for a weight array by its values (a 128-bit digest of its bytes, read in place)."""
    a = np.ascontiguousarray(w)
    return a.shape, a.dtype.str, hashlib.blake2b(a.reshape(-1).view(np.uint8), digest_size=16).digest()


def _linear_requant(w: np.ndarray, bias: np.ndarray, e_x: int, e_w: np.ndarray, e_y: int | None,
                    act, rounded: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Quantized weights and bias (int64, unclipped) of a conv/dense and its requantizing attributes:
    per output channel c, y = clip((acc + bias_q) >> (e_x + e_w[c] - e_y)) with the shift's half-LSB in
    bias_q (round to nearest); `e_y` None keeps the int32 accumulator, channel c counting
    2**-(e_x + e_w[c]) (`wide_output`).  `rounded`: (exponents, int8 weights) rounded for the layer's
    output (weight_rounding.py), used for the channels whose exponent is still the one they were
    rounded at; the others round to nearest."""
    e_w = fit_bias(e_w, bias, e_x)
    if e_y is not None:
        # a shift of 32 or more leaves only the sign of an int32 accumulator: such a channel (its
        # weights tiny next to the others') gets the coarsest exponent a shift of 31 expresses
        e_w = np.minimum(e_w, 31 + e_y - e_x)
    w_q = _q(w, e_w.reshape((-1,) + (1,) * (w.ndim - 1)), -127, 127, np.int8)
    if rounded is not None:
        same = np.broadcast_to(rounded[0] == e_w, (w.shape[0],))
        w_q[same] = rounded[1][same]
    bias_q = _q(bias, e_x + e_w, -2 ** 31, 2 ** 31 - 1, np.int64)
    attrs: dict = dict(weight_exp=channel_attr(e_w))
    if e_y is not None:
        shifts = e_x + e_w - e_y
        bias_q = bias_q + np.where(shifts > 0, np.left_shift(1, np.maximum(shifts - 1, 0)), 0)
        attrs.update(shift=channel_attr(shifts), clip=_qclip(act, e_y))
    return w_q, bias_q, attrs


def wide_output(shape: tuple[int, ...], e_x: int, weight_exp: int | tuple[int, ...]
                ) -> tuple[TensorInfo, np.ndarray | None]:
    """The int32 accumulator a conv/dense keeps for the host, and the per-channel factors its Dequantize
    multiplies by (None with one weight exponent).  Channel c's integers count 2**-(e_x + e_w[c]); the
    tensor's exponent is the finest channel's, e_x + max(e_w), so channel c is then multiplied by
    2**(max(e_w) - e_w[c]), a power of two: exact in float32."""
    e_w = np.atleast_1d(np.asarray(weight_exp, np.int64))
    info = TensorInfo(shape, "int32", e_x + int(e_w.max()))
    if e_w.size == 1:
        return info, None
    per = (1, -1) + (1,) * (len(shape) - 2)
    return info, np.exp2(e_w.max() - e_w).astype(np.float32).reshape(per)


def _q(value: np.ndarray, e, lo: int, hi: int, dtype) -> np.ndarray:
    return np.clip(np.rint(value.astype(np.float64) * 2.0 ** e), lo, hi).astype(dtype)


def _qclip(act, e: int) -> tuple[int, int]:
    lo, hi = act if act is not None else (-math.inf, math.inf)
    qlo = -128 if lo == -math.inf else int(np.clip(math.ceil(lo * 2.0 ** e - 0.5), -128, 127))
    qhi = 127 if hi == math.inf else int(np.clip(math.floor(hi * 2.0 ** e + 0.5), -128, 127))
    return qlo, qhi


def quantize(graph: Graph, cal: Calibration, weight_cache: dict | None = None) -> Graph:
    """The int8 graph: QConv/QDense/QAdd with shifts and clips, int8 pooling and layout ops,
    Quantize/Dequantize at the borders with float ops and the graph's inputs and outputs.

    `weight_cache` (a dict kept by the caller) keeps the weight exponents between calls on the same
    graph: they depend on the weights alone, and the exponent search quantizes it many times.
    graph.notes["requant"] "multiplier" gives the conv/dense that requantize to int8 float per-channel
    weight scales and fixed-point multipliers (fixed_point.py); else power-of-two shifts."""
    g = graph
    fixed = g.notes.get(REQUANT_NOTE) == "multiplier"
    pow2_nodes = set(g.notes.get(POW2_NODES_NOTE, ()))
    plan = precision_plan(g)
    int8_nodes = [n for n in g.nodes if n.name in plan.int8]
    int8_names = plan.int8
    cache = {} if weight_cache is None else weight_cache
    wexp = {}
    for n in int8_nodes:
        if int8_rule(n.op) == "weights":
            if n.name not in cache:
                cache[n.name] = weight_exponents(g.consts[n.inputs[1]])
            wexp[n.name] = cache[n.name]
    # a multiplier expresses factors above 1 (fixed_point.HEADROOM): no output needs coarsening for its weights
    multiplied = {k for k in wexp if fixed and k not in plan.wide and k not in pow2_nodes}
    headroom = {k: fixed_point.HEADROOM if k in multiplied else 0 for k in wexp}
    pairs = wide_pairs(g, plan.int8, plan.wide)  # conv output -> skip: the conv keeps extra bits
    users = g.consumers() if pairs else {}
    exp = assign_exponents(g, cal, int8_nodes, {k: int(e.min()) + headroom[k] for k, e in wexp.items()}, pairs)
    widened: dict[str, int] = {}  # wide conv output -> k
    channel_scale: dict[str, np.ndarray] = {}  # int32 conv output -> its channels' factors after Dequantize
    q = Graph([], {}, list(g.inputs), list(g.outputs), {}, g.name, dict(g.notes))
    for t in g.inputs:
        q.tensors[t] = g.tensors[t]
    qname: dict[str, str] = {}  # float tensor -> its int8 (or int32) version
    fname: dict[str, str] = {t: t for t in g.inputs}  # tensor -> its float version

    def as_int(t: str, reader: Node) -> str:
        if t in qname:
            return qname[t]
        if t not in fname:
            raise CompileError(f"input {t!r} has no value", node=reader.name, op=reader.op)
        name = f"{t}.q"
        q.tensors[name] = TensorInfo(g.tensors[t].shape, "int8", exp[t])
        q.nodes.append(Node("Quantize", q.fresh_name(f"{t}.quantize"), [fname[t]], [name], dict(exp=exp[t])))
        qname[t] = name
        return name

    def as_float(t: str) -> str:
        """The float version of t keeps t's name; an int8 producer gets a Dequantize."""
        if t in fname:
            return fname[t]
        if t in g.consts:
            q.consts[t] = g.consts[t]
            q.tensors[t] = g.tensors[t]
            fname[t] = t
            return t
        src = qname[t]
        q.tensors[t] = TensorInfo(g.tensors[t].shape, "float32")
        ins = [src] + ([q.add_const(f"{t}.channel_scale", channel_scale[t])] if t in channel_scale else [])
        q.nodes.append(Node("Dequantize", q.fresh_name(f"{t}.dequantize"), ins, [t], dict(exp=q.tensors[src].exp)))
        fname[t] = t
        return t

    for n in g.nodes:
        if n.name not in int8_names:
            ins = [as_float(i) if i else "" for i in n.inputs]
            q.tensors[n.outputs[0]] = g.tensors[n.outputs[0]]
            q.nodes.append(Node(n.op, n.name, ins, list(n.outputs[:1]), dict(n.attrs)))
            fname[n.outputs[0]] = n.outputs[0]
            continue
        out = n.outputs[0]
        wide = n.name in plan.wide
        attrs = {k: v for k, v in n.attrs.items() if k != "act"}
        if int8_rule(n.op) == "weights":
            x = as_int(n.inputs[0], n)
            w = g.consts[n.inputs[1]]
            bias = g.consts[n.inputs[2]] if len(n.inputs) > 2 and n.inputs[2] else np.zeros(w.shape[0], np.float32)
            if n.name in multiplied:
                w_q, bias_q, requant = fixed_point.fixed_requant(w, bias, exp[n.inputs[0]], exp[out],
                                                                 _qclip(n.attrs.get("act"), exp[out]), n.name,
                                                                 cache.get((FLOAT_SCALE_KEY, n.name)))
            else:
                w_q, bias_q, requant = _linear_requant(w, bias, exp[n.inputs[0]], wexp[n.name],
                                                       None if wide else exp[out], n.attrs.get("act"),
                                                       cache.get((ROUNDED_KEY, n.name)))
            if out in pairs and (widening := widen(g, w_q, bias_q, requant,
                                                   exp[out] - exp[reader_output(g, out, users)])):
                widened[out], bias_q, requant = widening
            ins = [x, q.add_const(f"{n.name}.weight_q", w_q)]
            attrs.update(requant)
            if out in widened:
                info = TensorInfo(g.tensors[out].shape, "int32", exp[out] + widened[out])
            elif wide:
                info, scale = wide_output(g.tensors[out].shape, exp[n.inputs[0]], requant["weight_exp"])
                if scale is not None:
                    channel_scale[out] = scale
            else:
                info = TensorInfo(g.tensors[out].shape, "int8", exp[out])
            if np.any(bias_q) or len(n.inputs) > 2:
                ins.append(q.add_const(f"{n.name}.bias_q", np.clip(bias_q, -2 ** 31, 2 ** 31 - 1).astype(np.int32)))
            op = op_def(n.op, n).int8_op
        elif int8_rule(n.op) == "product":
            ins = [as_int(i, n) for i in n.inputs]
            e_in = exp[n.inputs[0]] + exp[n.inputs[1]]
            if wide:  # the int32 product leaves as it is, on the exponents' sum (a float reader dequantizes it)
                info = TensorInfo(g.tensors[out].shape, "int32", e_in)
            else:
                attrs.update(shift=e_in - exp[out], clip=_qclip(n.attrs.get("act"), exp[out]))
                info = TensorInfo(g.tensors[out].shape, "int8", exp[out])
            op = op_def(n.op, n).int8_op
        elif int8_rule(n.op) == "sum":
            ins = [as_int(i, n) for i in n.inputs]
            k = max(widened.get(i, 0) for i in n.inputs)
            attrs.update(shift=exp[n.inputs[0]] + k - exp[out], clip=_qclip(n.attrs.get("act"), exp[out]))
            if any(i in widened for i in n.inputs):  # the skip scaled to the wide conv's grid
                attrs["left"] = tuple(0 if i in widened else k for i in n.inputs)
            op, info = op_def(n.op, n).int8_op, TensorInfo(g.tensors[out].shape, "int8", exp[out])
        else:
            ins = [as_int(i, n) if i else "" for i in n.inputs]
            op, info = n.op, TensorInfo(g.tensors[out].shape, "int8", exp[out])
            if n.op == "Clip":
                attrs["lo"], attrs["hi"] = _qclip((n.attrs["lo"], n.attrs["hi"]), exp[out])
            elif n.op == "Pad":
                attrs["value"] = float(_q(np.array(n.attrs["value"]), exp[out], -128, 127, np.int8))
        name = q.fresh_name(f"{out}.q" if info.dtype == "int8" else f"{out}.i32")
        q.tensors[name] = info
        q.nodes.append(Node(op, n.name, ins, [name], attrs))
        qname[out] = name
    for t in g.outputs:
        if t not in fname:
            as_float(t)
    q.notes["calibration"] = dict(samples=cal.samples, synthetic=cal.synthetic)
    q.prune()
    q.validate()
    return q
