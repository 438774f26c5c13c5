"""Where int8 loses accuracy: the float and the int8 graph side by side, layer by layer.

For each node the int8 graph computes in int8 (or int32), its dequantized output
is compared with the float output of the same node in the float graph it was
quantized from (after equalization and bias correction, so the two compute the
same function): SQNR (dB), cosine, the exponent, and the fraction of float
values the int8 range clips at that exponent.  Both graphs run on the host
(`execute.run_graph`); the accelerator computes the int8 graph bit-exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.ops.execute import check_feeds, run_graph
from vtakit.compiler.ir import Graph
from vtakit.tables import TextTable, save_figure

INT8_LIMITS = (-128.5, 127.5)  # values beyond these clip once scaled by 2**exp


@dataclass(frozen=True)
class LayerAccuracy:
    node: str
    op: str
    dtype: str  # int8 or int32
    exp: int
    sqnr_db: float
    cosine: float
    clipped: float  # fraction of float values outside the int8 range at `exp` (0 for int32)


@dataclass
class AccuracyReport:
    layers: list[LayerAccuracy] = field(default_factory=list)
    outputs: dict[str, tuple[float, float]] = field(default_factory=dict)  # output -> (sqnr, cosine)

    def worst(self, count: int = 5) -> list[LayerAccuracy]:
        return sorted(self.layers, key=lambda r: r.sqnr_db)[:count]

    def table(self) -> TextTable:
        """The per-layer rows as a table a rich Console renders and `print` shows as text."""
        t = TextTable(title="int8 vs float, per layer (dequantized int8 output against the float graph's)")
        for col in ("layer", "op", "int", "exp", "SQNR dB", "cosine", "clipped %"):
            t.add_column(col, justify="left" if col in ("layer", "op", "int") else "right")
        for r in self.layers:
            t.add_row(r.node, r.op, r.dtype, str(r.exp), f"{r.sqnr_db:.1f}", f"{r.cosine:.5f}",
                      f"{100 * r.clipped:.3f}")
        return t

    def summary_lines(self) -> list[str]:
        lines = [f"output {o}: SQNR {s:.1f} dB, cosine {c:.5f} against float" for o, (s, c) in self.outputs.items()]
        if self.layers:
            lines.append("lowest SQNR: " + ", ".join(f"{r.node} ({r.sqnr_db:.1f} dB)" for r in self.worst(3)))
        return lines

    def plot(self, path) -> Path:
        """SQNR and cosine per layer in graph order (needs matplotlib)."""
        matplotlib.use("Agg")

        xs = np.arange(len(self.layers))
        fig, (a, b) = plt.subplots(2, 1, figsize=(max(7.0, 0.18 * len(xs)), 6), sharex=True)
        a.bar(xs, [r.sqnr_db for r in self.layers], color="tab:blue")
        a.set_ylabel("SQNR (dB)")
        a.set_title("int8 vs float per layer")
        b.plot(xs, [r.cosine for r in self.layers], marker="o", ms=3, color="tab:red")
        b.set_ylabel("cosine")
        b.set_xticks(xs, [r.node for r in self.layers], rotation=90, fontsize=6)
        return save_figure(fig, path)


def compare(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(SQNR in dB of b as an approximation of a, cosine of the two)."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    noise = float(np.sum(np.square(a - b)))
    signal = float(np.sum(np.square(a)))
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    cos = float(a @ b / (na * nb)) if na > 0 and nb > 0 else float(na == nb)
    return sqnr, cos


def _values(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    seen: dict[str, np.ndarray] = dict(check_feeds(graph, feeds))

    def observe(name: str, value: np.ndarray) -> None:
        seen[name] = value

    run_graph(graph, seen.copy(), observer=observe)
    return seen


def accuracy_report(float_graph: Graph, int8_graph: Graph, feeds: dict[str, np.ndarray]) -> AccuracyReport:
    """Per-node comparison of `int8_graph` (quantize's output) with `float_graph` on `feeds`."""
    fvals, qvals = _values(float_graph, feeds), _values(int8_graph, feeds)
    fnodes = {n.name: n for n in float_graph.nodes}
    # an int32 accumulator with per-channel weight exponents: its Dequantize's factors (quantize.wide_output)
    channel_scales = {n.inputs[0]: int8_graph.consts[n.inputs[1]] for n in int8_graph.nodes
                      if n.op == "Dequantize" and len(n.inputs) > 1}
    rep = AccuracyReport()
    for n in int8_graph.nodes:
        out = n.outputs[0]
        info = int8_graph.tensors[out]
        f = fnodes.get(n.name)
        if f is None or info.exp is None or info.dtype not in ("int8", "int32") or out not in qvals:
            continue
        ref = fvals.get(f.outputs[0])
        if ref is None:
            raise CompileError(f"the float graph computed no value for {f.outputs[0]!r}", node=n.name)
        deq = qvals[out].astype(np.float64) * 2.0 ** -info.exp * channel_scales.get(out, 1.0)
        sqnr, cos = compare(ref, deq)
        clipped = 0.0
        if info.dtype == "int8":
            scaled = np.asarray(ref, np.float64) * 2.0 ** info.exp
            clipped = float(np.mean((scaled < INT8_LIMITS[0]) | (scaled > INT8_LIMITS[1])))
        rep.layers.append(LayerAccuracy(n.name, f.op, info.dtype, int(info.exp), sqnr, cos, clipped))
    for o in float_graph.outputs:
        if o in qvals:
            rep.outputs[o] = compare(fvals[o], qvals[o])
    return rep
