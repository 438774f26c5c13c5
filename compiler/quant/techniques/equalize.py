"""Cross-layer equalization and bias correction (Nagel et al., "Data-Free Quantization", 2019).

With one power-of-two weight scale per tensor, a layer whose output channels
span very different ranges (typical after batch norm is folded, worst in
depthwise convolutions) leaves most channels with few int8 levels.  For two
consecutive layers y = f(x W1 + b1) W2, with f the identity or ReLU (positively
homogeneous: f(x / s) = f(x) / s for s > 0), dividing output channel c of the
first layer by s_c and multiplying input channel c of the second by s_c leaves
the float function unchanged.  s_c = sqrt(r1_c / r2_c) (r1_c the range of the
first layer's channel, r2_c of the second's) makes both ranges sqrt(r1_c r2_c):
equal across the pair.  A clip with a finite upper bound (ReLU6) does not
commute with a per-channel scale, so such pairs are left alone unless the caller
asks to treat it as ReLU (`clip_as_relu`, which changes the float model).

Bias correction: quantizing the weights shifts each output channel's mean by
(W_q - W) E[x]; with E[x] per input channel measured on the calibration
samples, the bias absorbs that shift.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.options import QUANT_OPTIONS, EqualizeMode
from vtakit.compiler.quant.techniques.registry import Stage, Technique, register

EQUALIZE_ROUNDS = 100  # chains (conv -> depthwise -> conv) converge geometrically
CONVERGED = 1e-7  # stop once no scale differs from 1 by more


def has_const_weights(g: Graph, n: Node) -> bool:
    """A conv/dense with constant weights: the layers a per-channel or per-tensor factor can move through."""
    return n.op in ("Conv", "Dense") and len(n.inputs) > 1 and g.is_const(n.inputs[1])


def is_depthwise(g: Graph, n: Node) -> bool:
    w = g.consts[n.inputs[1]]
    return n.op == "Conv" and n.attrs.get("group", 1) > 1 and w.shape[1] == 1 and n.attrs["group"] == w.shape[0]


def _commutes(n: Node, clip_as_relu: bool) -> bool:
    lo, hi = n.attrs.get("act", (-math.inf, math.inf))
    if lo == -math.inf and hi == math.inf:
        return True
    return lo == 0.0 and (hi == math.inf or clip_as_relu)


def equalizable_pairs(g: Graph, clip_as_relu: bool = False) -> list[tuple[Node, Node]]:
    """(first, second): a conv/dense whose only reader is a conv/dense taking it as data input,
    through an activation a per-channel scale commutes with; grouped convs only as depthwise."""
    users = g.consumers()
    pairs = []
    for n in g.nodes:
        if not has_const_weights(g, n) or n.outputs[0] in g.outputs or not _commutes(n, clip_as_relu):
            continue
        if n.attrs.get("group", 1) > 1 and not is_depthwise(g, n):
            continue
        readers = users.get(n.outputs[0], [])
        if len(readers) != 1 or not has_const_weights(g, readers[0]) or readers[0].inputs[0] != n.outputs[0]:
            continue
        m = readers[0]
        if m.op != n.op or (m.attrs.get("group", 1) > 1 and not is_depthwise(g, m)):
            continue
        pairs.append((n, m))
    return pairs


def _out_ranges(w: np.ndarray) -> np.ndarray:
    return np.max(np.abs(w.reshape(w.shape[0], -1)), axis=1)


def _in_ranges(g: Graph, m: Node) -> np.ndarray:
    w = g.consts[m.inputs[1]]
    if m.op == "Conv" and is_depthwise(g, m):
        return _out_ranges(w)
    return np.max(np.abs(np.moveaxis(w, 1, 0).reshape(w.shape[1], -1)), axis=1)


def _set_const(g: Graph, node: Node, what: str, value: np.ndarray) -> str:
    """A fresh constant (the old one may be shared with other nodes)."""
    return g.add_const(f"{node.name}.{what}_eq", value.astype(np.float32))


def equalize(graph: Graph, clip_as_relu: bool = False, rounds: int = EQUALIZE_ROUNDS) -> Graph:
    """The graph with the channel ranges of every equalizable pair made equal (see the docstring)."""
    g = graph.copy()
    for _ in range(rounds):
        moved = 0.0
        for n, m in equalizable_pairs(g, clip_as_relu):
            w1, w2 = g.consts[n.inputs[1]], g.consts[m.inputs[1]]
            r1, r2 = _out_ranges(w1), _in_ranges(g, m)
            ok = (r1 > 0) & (r2 > 0)
            s = np.where(ok, np.sqrt(np.where(ok, r1, 1.0) / np.where(ok, r2, 1.0)), 1.0)
            moved = max(moved, float(np.max(np.abs(s - 1.0))))
            shape1 = (-1,) + (1,) * (w1.ndim - 1)
            n.inputs[1] = _set_const(g, n, "weight", w1 / s.reshape(shape1))
            if len(n.inputs) > 2 and n.inputs[2]:
                n.inputs[2] = _set_const(g, n, "bias", g.consts[n.inputs[2]] / s)
            if clip_as_relu and n.attrs.get("act", (0.0, math.inf))[1] != math.inf:
                n.attrs["act"] = (0.0, math.inf)
            if m.op == "Conv" and is_depthwise(g, m):
                w2 = w2 * s.reshape((-1,) + (1,) * (w2.ndim - 1))
            else:
                w2 = w2 * s.reshape((1, -1) + (1,) * (w2.ndim - 2))
            m.inputs[1] = _set_const(g, m, "weight", w2)
        if moved <= CONVERGED:
            break
    g.prune()
    return g


def input_means(graph: Graph, samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-channel mean of each conv/dense node's data input over the samples (axis 1 is channels)."""
    want = {n.inputs[0] for n in graph.nodes if has_const_weights(graph, n)}
    if not want:  # no conv/dense: nothing to measure, no run of the graph (a huge elementwise chain compiles fast)
        return {}
    sums: dict[str, np.ndarray] = {}

    def observe(name: str, value: np.ndarray) -> None:
        if name in want and value.dtype == np.float32:
            axes = tuple(a for a in range(value.ndim) if a != 1)
            sums[name] = sums.get(name, 0.0) + value.astype(np.float64).mean(axis=axes)

    for feeds in samples:
        for name, v in feeds.items():
            observe(name, np.asarray(v))
        run_graph(graph, feeds, observer=observe)
    return {k: v / len(samples) for k, v in sums.items()}


def correct_bias(graph: Graph, samples: list[dict[str, np.ndarray]],
                 quantized_weight: Callable[[np.ndarray], np.ndarray],
                 shifts: dict[str, np.ndarray] | None = None) -> Graph:
    """Subtract from each conv/dense bias the mean output shift its weight quantization causes: from each
    input channel's mean, or `shifts[node]` where a caller measured it (weight_rounding.plan_rounding)."""
    g = graph.copy()
    means = input_means(g, samples)
    for n in g.nodes:
        if not has_const_weights(g, n) or n.inputs[0] not in means or n.attrs.get("keep_float"):
            continue  # a node kept float has no int8 weight error to offset
        w = g.consts[n.inputs[1]].astype(np.float64)
        mu = means[n.inputs[0]]
        dw = None if shifts and n.name in shifts else quantized_weight(g.consts[n.inputs[1]]).astype(np.float64) - w
        if dw is None:
            shift = shifts[n.name]
        elif n.op == "Dense":
            shift = dw @ mu
        elif is_depthwise(g, n):
            shift = dw.reshape(w.shape[0], -1).sum(axis=1) * mu
        elif n.attrs.get("group", 1) == 1:
            shift = dw.reshape(w.shape[0], w.shape[1], -1).sum(axis=2) @ mu
        else:
            continue
        bias = g.consts[n.inputs[2]] if len(n.inputs) > 2 and n.inputs[2] else np.zeros(w.shape[0], np.float32)
        new = (bias.astype(np.float64) - shift).astype(np.float32)
        if len(n.inputs) > 2 and n.inputs[2]:
            n.inputs[2] = g.add_const(f"{n.name}.bias_corrected", new)
        else:
            n.inputs.append(g.add_const(f"{n.name}.bias_corrected", new))
    g.prune()
    return g


def equalize_stage(g: Graph, samples: list[dict[str, np.ndarray]], mode: EqualizeMode) -> Graph:
    """The FLOAT stage: `g` equalized as `mode` says ("off": `g` itself)."""
    if mode is EqualizeMode.OFF:
        return g
    return equalize(g, clip_as_relu=mode is EqualizeMode.CLIP_AS_RELU)


register(Technique("equalize", Stage.FLOAT, equalize_stage, QUANT_OPTIONS["equalize"], order=10,
                   doc="cross-layer equalization of consecutive layers' channel ranges"))
