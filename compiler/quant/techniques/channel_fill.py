"""Conv inputs that the host quantizes, scaled channel by channel.

With one power-of-two scale for a whole activation tensor, a channel whose range is 2**k below the
tensor's largest gets k bits fewer.  Networks whose conv inputs come from float ops on the host show
it most.  PP-OCRv4's text detector (RapidOCR's wheel) is an example: it has a hardswish and a learned
affine before nearly every conv, with channel maxima spread over 2**6.  There the SQNR fell to 7 dB at
the second depthwise conv, and the probability map's cosine to float was 0.75.

Where such an input is quantized on the host anyway (it is written by a float op, or is a graph
input), the host first multiplies it by a per-channel power of two 2**k[c].  That is a float `Mul` by a
constant vector, just before the host's Quantize.  The conv's weights that read channel c are divided
by 2**k[c], so the float function is unchanged.

- Depthwise convs: output channel c reads only input channel c, so no later layer wins the lost bits
  back.  With per-channel weight exponents the division is exact and costs the weights nothing: their
  exponent moves by k[c] (float per-channel scales with multipliers take it the same way).  So k[c]
  fills channel c up to HEADROOM_BITS below the tensor's calibrated maximum (`fill_bits`).  It is
  capped so that the layer's weight exponents stay within what one vector SHR spans
  (`channel_scales.CHANNEL_SPREAD`).
- Dense (group-1) convs: dividing weight column c moves quantization noise from channel c's activation
  to its weights.  Filling in full was worse on the text detector (map cosine 0.92 against 0.95 with
  only the depthwise inputs filled, 160x160).
  So `balanced_bits` takes the power of two that balances the two noise terms, estimated from the
  calibration samples, plus BALANCE_EXTRA_BITS, within the same bounds.  With that balance the
  detector's map cosine went from 0.824 to 0.913 (0.894 once int32 results took per-channel weight
  exponents, which lifted RapidOCR's recognizer from 0.783 to 0.968).

Tensors made on the accelerator are left alone: filling them would need per-channel clip bounds in
their producers' epilogues.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtakit.compiler.quant.techniques.channel_scales import CHANNEL_SPREAD
from vtakit.compiler.quant.techniques.equalize import has_const_weights, is_depthwise
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.quant.precision import precision_plan
from vtakit.compiler.quant.quantize import EXP_RANGE, ideal_exponent
from vtakit.compiler.quant.techniques.range_scale import RangeScaling
from vtakit.compiler.quant.techniques.registry import Stage, Technique, WeightState, register

HEADROOM_BITS = 1
"""A filled channel stops this many bits below the tensor's calibrated maximum.  With 0 bits the text
detector scored the same (depthwise inputs only, 160x160: map cosine 0.952 vs 0.950), but a channel
scaled right up to the edge clips as soon as a test input goes past its calibration maximum."""
MAX_BITS = 8
"""The most one channel is scaled up (2**8).  A channel nearly silent on the calibration samples must not
be blown up to the edge of the range."""
BALANCE_EXTRA_BITS = 1
"""Dense convs: one bit more than the balance point `balanced_bits` estimates.  Measured on RapidOCR's
three PP-OCR networks (`benchmarks/ocr_real.py`, pynq, host reference) once the int32-output convs had
per-channel weight exponents: det 320x320 map cosine 0.884 -> 0.894 (256: 0.884 -> 0.894, 416:
0.890 -> 0.894), cls 0.908 -> 0.933, rec 0.960 -> 0.968; 2 bits was no better (0.891 / 0.930 /
0.963)."""
SUFFIX = ".channel_fill"


@dataclass(frozen=True)
class ChannelFill:
    """What was filled: conv -> the bits k[c] of its input channels (only convs with some k > 0)."""
    bits: dict[str, list[int]] = field(default_factory=dict)

    def summary(self) -> str:
        scaled = sum(int(np.count_nonzero(k)) for k in self.bits.values())
        total = sum(len(k) for k in self.bits.values())
        return (f"channel fill: {len(self.bits)} conv input(s) quantized on the host scaled per channel "
                f"({scaled} of {total} channels scaled up)")


def _conv2d(g: Graph, n: Node) -> bool:
    """A 2-D conv with constant weights (the shapes the per-channel factors are written for)."""
    return has_const_weights(g, n) and n.op == "Conv" and g.consts[n.inputs[1]].ndim == 4


def _is_depthwise(g: Graph, n: Node) -> bool:
    return _conv2d(g, n) and is_depthwise(g, n)


def candidates(g: Graph) -> list[Node]:
    """Convs computed in int8 whose input the host quantizes (a float op's output or a graph input):
    depthwise ones and group-1 ones."""
    plan = precision_plan(g)
    made_by = g.producers()
    found = []
    for n in g.nodes:
        if n.name not in plan.int8 or not _conv2d(g, n) or not (_is_depthwise(g, n) or n.attrs.get("group", 1) == 1):
            continue
        x = n.inputs[0]
        producer = made_by.get(x)
        if g.is_const(x) or (producer is not None and producer.name in plan.int8):
            continue
        w = g.consts[n.inputs[1]]
        if g.tensors[x].shape[1] != (w.shape[0] if _is_depthwise(g, n) else w.shape[1]):
            continue
        found.append(n)
    return found


def channel_stats(g: Graph, tensors: set[str], samples: list[dict[str, np.ndarray]]
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(max |value|, mean square) per channel (axis 1) of each tensor over the samples."""
    amax: dict[str, np.ndarray] = {}
    sums: dict[str, list] = {}

    def observe(name: str, value: np.ndarray) -> None:
        if name in tensors and value.ndim >= 2:
            v = np.asarray(value, np.float64)
            axes = tuple(i for i in range(v.ndim) if i != 1)
            m = np.max(np.abs(v), axis=axes)
            amax[name] = np.maximum(amax[name], m) if name in amax else m
            sq, count = np.sum(v * v, axis=axes), v.size // v.shape[1]
            old = sums.get(name, [0.0, 0])
            sums[name] = [old[0] + sq, old[1] + count]

    inner = bool(tensors - set(g.inputs))  # only graph inputs (a first conv's): the feeds alone tell
    for feeds in samples:
        for name, v in feeds.items():
            observe(name, np.asarray(v))
        if inner:
            run_graph(g, feeds, observer=observe)
    return amax, {t: s / n for t, (s, n) in sums.items()}


def balanced_bits(amax: np.ndarray, msq: np.ndarray, w: np.ndarray) -> np.ndarray:
    """k[c] for the input channels of a dense conv w (O, C, kh, kw): a column divided by r = 2**k moves
    noise from channel c's activation (sum_o w[o, c]**2 * (step_x / r)**2) to its weights
    (mean x_c**2 * kh * kw * sum_o step_w[o]**2 * r**2); r = the fourth root of their ratio balances the
    two, rounded to a power of two, plus BALANCE_EXTRA_BITS, within the fill's bounds (`fill_bits`)."""
    top, room = _room(amax)
    if top <= 0:
        return room
    step_x = top / 127
    step_w = np.max(np.abs(w.reshape(w.shape[0], -1)), axis=1) / 127
    taps = w.shape[2] * w.shape[3]
    act = np.sum(np.square(w.astype(np.float64)), axis=(0, 2, 3)) * step_x ** 2
    wgt = msq * taps * float(np.sum(np.square(step_w)))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where((act > 0) & (wgt > 0), (act / np.where(wgt > 0, wgt, 1)) ** 0.25, 1.0)
    k = np.round(np.log2(np.maximum(r, 1.0))).astype(np.int64) + BALANCE_EXTRA_BITS
    return np.minimum(k, room)


def _room(amax: np.ndarray) -> tuple[float, np.ndarray]:
    """(the tensor's maximum, the most bits each channel may be scaled up): up to HEADROOM_BITS below that
    maximum, at most MAX_BITS, none for a silent channel."""
    top = float(np.max(amax)) if amax.size else 0.0
    if top <= 0:
        return top, np.zeros(amax.size, np.int64)
    live = amax > 0
    room = np.floor(np.log2(top / np.where(live, amax, top))).astype(np.int64) - HEADROOM_BITS
    return top, np.where(live, np.clip(room, 0, MAX_BITS), 0)


def fill_bits(amax: np.ndarray, w: np.ndarray) -> np.ndarray:
    """k[c] for channel maxima `amax` read by depthwise weights w (C, 1, kh, kw): see the module docstring."""
    _, k = _room(amax)
    rows = np.max(np.abs(w.reshape(w.shape[0], -1)), axis=1)
    used = rows > 0
    if used.any():
        e = np.array([ideal_exponent(float(r)) if r > 0 else EXP_RANGE[1] for r in rows], np.int64)
        # after dividing by 2**k the weights' exponents are e + k: keep them within one SHR's spread
        # (3 to spare for the finer exponents best_row_exps may choose) and below the top exponent
        cap = np.minimum(int(np.min(e[used])) + CHANNEL_SPREAD - 3, EXP_RANGE[1]) - e
        k = np.minimum(k, np.maximum(cap, 0))
    return np.where(used, k, 0)


def plan_channel_fill(g: Graph, samples: list[dict[str, np.ndarray]]) -> ChannelFill:
    """The bits of every candidate conv's input channels, from the samples' channel statistics."""
    convs = candidates(g)
    if not convs:
        return ChannelFill()
    amax, msq = channel_stats(g, {n.inputs[0] for n in convs}, samples)
    bits = {}
    for n in convs:
        x, w = n.inputs[0], g.consts[n.inputs[1]]
        if x not in amax:
            continue
        k = fill_bits(amax[x], w) if _is_depthwise(g, n) else balanced_bits(amax[x], msq[x], w)
        if np.any(k > 0):
            bits[n.name] = [int(v) for v in k]
    return ChannelFill(bits)


def apply_channel_fill(graph: Graph, fill: ChannelFill) -> Graph:
    """A copy of the graph with each planned conv reading its input times 2**k (a host Mul) and its
    weights divided by 2**k, channel by channel; convs reading one tensor with the same k share the Mul."""
    if not fill.bits:
        return graph
    g = graph.copy()
    muls: dict[tuple[str, tuple[int, ...]], str] = {}
    listed, mul_before = list(g.nodes), {}  # conv -> the Mul that goes just before it
    for n in listed:
        k = fill.bits.get(n.name)
        if k is None:
            continue
        x = n.inputs[0]
        scale = np.exp2(np.array(k, np.float64))
        key = (x, tuple(k))
        if key not in muls:
            shape = (1, len(k)) + (1,) * (len(g.tensors[x].shape) - 2)
            factor = g.add_const(f"{n.name}{SUFFIX}.factor", scale.astype(np.float32).reshape(shape))
            out = g.fresh_name(f"{x}{SUFFIX}")
            g.tensors[out] = g.tensors[x]
            g.nodes.append(Node("Mul", g.fresh_name(f"{n.name}{SUFFIX}"), [x, factor], [out]))  # placed below
            mul_before[id(n)] = g.nodes[-1]
            muls[key] = out
        n.inputs[0] = muls[key]
        w = g.consts[n.inputs[1]]
        axis = (-1, 1, 1, 1) if _is_depthwise(g, n) else (1, -1, 1, 1)
        divided = (w.astype(np.float64) / scale.reshape(axis)).astype(w.dtype)
        n.inputs[1] = g.add_const(f"{n.name}.weight_cf", divided)
    # each Mul just before its conv, in one pass (an insert per Mul was quadratic in a long network)
    g.nodes = [m for n in listed for m in ((mul_before[id(n)], n) if id(n) in mul_before else (n,))]
    g.prune()
    g.validate()
    return g


def channel_fill_stage(state: WeightState, _value: None) -> WeightState:
    """The WEIGHTS stage, after range scaling and only where it scaled the graph: the planned conv inputs
    filled channel by channel (recorded as the ChannelFill, where any conv has bits)."""
    if not isinstance(state.records.get("range_scale"), RangeScaling):
        return state
    fill = plan_channel_fill(state.graph, state.samples)
    if not fill.bits:
        return state
    return state.with_weights(apply_channel_fill(state.uncorrected, fill)).record("channel_fill", fill)


register(Technique("channel_fill", Stage.WEIGHTS, channel_fill_stage, order=20,
                   doc="conv inputs the host quantizes, filled channel by channel (after range scaling)"))
