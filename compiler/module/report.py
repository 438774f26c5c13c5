"""Where a network's time goes: a per-layer table and a roofline plot of the accelerator tasks.

The roofline places each accelerator task by arithmetic intensity (operations
per DRAM byte it moved) against the configuration's two roofs: peak compute
(2 x batch x block_in x block_out ops per cycle) and memory bandwidth (bus bytes
per cycle), both at the configured clock.  Each graph output is listed as float
or dequantized int8/int32 (quant/precision.py's rule decides which), so a
user sees whether its values sit on a power-of-two grid.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
import math
from pathlib import Path

from vtakit.compiler.module.board_estimate import BoardHostEstimate, estimate as board_host_estimate
from vtakit.compiler.module.macs import MacSplit, node_macs
from vtakit.compiler.module.notes import ModelFactors, QuantNotes
from vtakit.compiler.ops import op_def
from vtakit.compiler.quant.recipe import recipe_lines
from vtakit.compiler.ops import keeps_scale
from vtakit.isa.config import HwConfig
from vtakit.errors import needs_full_install, pc_side_missing
from vtakit.tables import TextTable, save_figure

_NO_PLOTS = ""
try:
    import matplotlib
    import matplotlib.pyplot as plt
except ImportError as missing:  # a board's runtime: tables and reports work, a roofline PNG says what it needs
    _NO_PLOTS = pc_side_missing(missing)

VTA_C2_C11_MS = 88.3  # VTA on the PYNQ board, ResNet-18 C2-C11 (WORKLOADS.md)


@dataclass
class LayerRow:
    node: str
    op: str
    place: str
    cycles: int | None
    ms: float  # predicted at the config's clock for accelerator tasks, measured wall time for host tasks
    macs: int
    utilization: float | None
    gops: float | None
    bytes_moved: int
    intensity: float | None  # ops per byte
    reason: str = ""  # why a host node runs on the host (partition.host_reason)


@dataclass
class OutputRow:
    name: str
    shape: tuple[int, ...]
    precision: str  # "float", "dequantized int8" or "dequantized int32" (" per channel": the finest step shown)
    step: float | None  # the dequantized values' resolution, 2**-exp (None: float)
    source: str  # the node that computed the value, "name (op)"

    def line(self) -> str:
        grid = f", steps of 2^{round(math.log2(self.step))} = {self.step:g}" if self.step else ""
        return f"output {self.name} {tuple(self.shape)}: {self.precision} from {self.source}{grid}"


def output_rows(graph) -> list[OutputRow]:
    """Each graph output's precision: values that come from a Dequantize (through one-input
    precision-neutral ops, which add no rounding) are dequantized int8 or an int32 accumulator;
    others are float.  The source is the op before those neutral ones."""
    prod = graph.producers()

    def origin(t: str):
        n = prod.get(t)
        while n is not None and keeps_scale(n.op) and len(n.inputs) == 1:
            n = prod.get(n.inputs[0])
        return n

    rows = []
    for o in graph.outputs:
        n, info = origin(o), graph.tensors[o]
        if n is not None and n.op == "Dequantize":
            src = graph.tensors[n.inputs[0]]
            m = origin(n.inputs[0])
            per_channel = " per channel" if len(n.inputs) > 1 else ""  # the finest channel's step below
            rows.append(OutputRow(o, info.shape, f"dequantized {src.dtype}{per_channel}", 2.0 ** -src.exp,
                                  f"{m.name} ({m.op})" if m else f"input {n.inputs[0]}"))
        else:
            rows.append(OutputRow(o, info.shape, "float", None, f"{n.name} ({n.op})" if n else f"input {o}"))
    return rows


def host_kernel_kinds(graph) -> dict[tuple[str, str], int]:
    """How many nodes of each op run on the host without an llvmlite kernel (numpy or onnx.reference):
    correct but slow, so the report names them."""
    out: dict[tuple[str, str], int] = {}
    for n in graph.nodes:
        kind = op_def(n.op, n).kernel
        if kind != "llvmlite":
            out[(n.op, kind)] = out.get((n.op, kind), 0) + 1
    return out


REASON_EXAMPLES = 3
"""How many node names a grouped host reason lists (a detector has hundreds of host nodes)."""


def host_reason_lines(reasons: dict[str, str]) -> list[str]:
    """The host nodes grouped by their reason, most frequent first: "reason: 12 nodes (a, b, c, ...)"."""
    by_reason: dict[str, list[str]] = {}
    for node, why in reasons.items():
        by_reason.setdefault(why, []).append(node)
    lines = []
    for why, nodes in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(nodes[:REASON_EXAMPLES]) + (", ..." if len(nodes) > REASON_EXAMPLES else "")
        lines.append(f"{why}: {len(nodes)} node{'s' if len(nodes) > 1 else ''} ({shown})")
    return lines


@dataclass
class ModuleReport:
    config: HwConfig
    device: str
    rows: list[LayerRow] = field(default_factory=list)
    border_transfers: int = 0
    host_segments: int = 0  # runs of consecutive host tasks (passes/segments.py groups them)
    outputs: list[OutputRow] = field(default_factory=list)
    slow_host_ops: dict[tuple[str, str], int] = field(default_factory=dict)  # (op, numpy|onnx.reference) -> nodes
    host_kernels: str = ""  # the CPU's host kernels: "native (llvmlite JIT)" or "numpy fallback" ("": on a GPU)
    board_host: BoardHostEstimate | None = None  # the host tasks on the board's ARM core, estimated
    kernel_ms: float = 0.0  # what the run paid compiling or loading host kernels (first use), not in host_ms

    @classmethod
    def of(cls, module) -> "ModuleReport":
        cfg = module.config
        run = module.last_run
        rep = cls(cfg, run.device or "?", border_transfers=run.border_transfers, host_segments=run.host_segments,
                  outputs=output_rows(module.graph))
        rep.slow_host_ops = host_kernel_kinds(module.graph)
        rep.host_kernels = module.last_host_kernels
        rep.kernel_ms = run.kernel_seconds * 1e3
        reasons = module.notes.host_reasons
        nodes = {n.name: n for n in module.graph.nodes}
        rep.board_host = board_host_estimate(module.graph, cfg, [t.node for t in run.tasks if t.place != "vta"])
        for t in run.tasks:
            if t.place == "vta" and t.cycles:
                ms = t.cycles / (cfg.clock_mhz * 1e3)
                util = t.macs / (t.cycles * cfg.peak_macs_per_cycle) if t.macs else None
                gops = 2 * t.macs / (ms * 1e6) if t.macs else None
                intensity = 2 * t.macs / t.bytes_moved if t.macs and t.bytes_moved else None
            else:
                ms, util, gops, intensity = t.seconds * 1e3, None, None, None
            macs = t.macs if t.place == "vta" or t.node not in nodes else node_macs(module.graph, nodes[t.node])
            rep.rows.append(LayerRow(t.node, t.op, t.place, t.cycles, ms, macs, util, gops, t.bytes_moved,
                                     intensity, reasons.get(t.node, "") if t.place != "vta" else ""))
        return rep

    # ------------------------------------------------------------ totals
    @property
    def accelerator_cycles(self) -> int:
        return sum(r.cycles or 0 for r in self.rows if r.place == "vta")

    @property
    def accelerator_ms(self) -> float:
        return self.accelerator_cycles / (self.config.clock_mhz * 1e3)

    @property
    def host_ms(self) -> float:
        return sum(r.ms for r in self.rows if r.place == "host")

    @property
    def accelerator_macs(self) -> int:
        return sum(r.macs for r in self.rows if r.place == "vta")

    @property
    def host_macs(self) -> int:
        return sum(r.macs for r in self.rows if r.place != "vta")

    @property
    def utilization(self) -> float | None:
        c = self.accelerator_cycles
        return self.accelerator_macs / (c * self.config.peak_macs_per_cycle) if c else None

    def to_dict(self) -> dict:
        return dict(config=self.config.label, device=self.device, accelerator_cycles=self.accelerator_cycles,
                    accelerator_ms=self.accelerator_ms, host_ms=self.host_ms, utilization=self.utilization,
                    border_transfers=self.border_transfers, host_segments=self.host_segments,
                    host_kernels=self.host_kernels, kernel_ms=self.kernel_ms,
                    board_host_ms=self.board_host.ms if self.board_host is not None else None,
                    layers=[asdict(r) for r in self.rows],
                    outputs=[asdict(o) for o in self.outputs],
                    host_without_kernels=[dict(op=op, kernel=kind, nodes=count)
                                          for (op, kind), count in sorted(self.slow_host_ops.items())])

    # ------------------------------------------------------------ views
    def table(self, *, host_rows: bool = True) -> TextTable:
        """The per-layer table: a rich Console renders it, print() shows it as text."""
        t = TextTable(title=f"per layer on {self.device} ({self.config.label}, {self.config.clock_mhz:g} MHz)")
        why = any(r.reason for r in self.rows)
        for col in ("layer", "op", "on", "cycles", "ms", "MMACs", "util %", "GOPS", "MB moved") + (("why host",) if why else ()):
            t.add_column(col, justify="left" if col in ("layer", "op", "on", "why host") else "right")
        for r in self.rows:
            if r.place == "host" and not host_rows and r.macs == 0:
                continue
            t.add_row(r.node, r.op, r.place, f"{r.cycles:,}" if r.cycles is not None else "",
                      f"{r.ms:.3f}", f"{r.macs / 1e6:.1f}" if r.macs else "",
                      f"{100 * r.utilization:.1f}" if r.utilization is not None else "",
                      f"{r.gops:.1f}" if r.gops is not None else "",
                      f"{r.bytes_moved / 1e6:.2f}" if r.bytes_moved else "", *((r.reason,) if why else ()))
        return t

    def summary_lines(self) -> list[str]:
        u = self.utilization
        lines = [f"accelerator: {self.accelerator_cycles:,} cycles = {self.accelerator_ms:.2f} ms at "
                 f"{self.config.clock_mhz:g} MHz ({self.accelerator_macs / 1e9:.2f} GMACs"
                 + (f", {100 * u:.1f} % of peak)" if u is not None else ")"),
                 f"host: {self.host_ms:.1f} ms measured on this machine in {self.host_segments} segments; "
                 f"{self.border_transfers} activations crossed between host and DRAM"
                 + (f"; host kernels: {self.host_kernels}" if self.host_kernels else "")
                 + (f" (compiling or loading them took {self.kernel_ms:.1f} ms more, on first use)"
                    if self.kernel_ms >= 0.05 else ""),
                 MacSplit(self.accelerator_macs, self.host_macs).line()]
        if self.board_host is not None:
            lines.append(self.board_host.line())
        slow = self.slow_host_ops
        if slow:
            lines.append("host ops without an llvmlite kernel: " + ", ".join(
                f"{op} x{count} ({kind})" for (op, kind), count in sorted(slow.items())))
        return lines + [o.line() for o in self.outputs]

    def roofline(self, path) -> Path:
        """A roofline PNG of the accelerator tasks (needs matplotlib)."""
        if _NO_PLOTS:
            raise needs_full_install("a roofline plot", _NO_PLOTS)
        matplotlib.use("Agg")

        cfg = self.config
        peak = cfg.peak_gops
        bw = cfg.bus_bytes * cfg.clock_mhz / 1e3  # GB/s
        pts = [r for r in self.rows if r.place == "vta" and r.gops and r.intensity]
        fig, ax = plt.subplots(figsize=(7.5, 5))
        lo = min([r.intensity for r in pts] + [peak / bw / 8]) / 2
        hi = max([r.intensity for r in pts] + [peak / bw * 8]) * 2
        xs = [lo, peak / bw, hi]
        ax.plot(xs, [min(peak, bw * x) for x in xs], color="black", lw=2,
                label=f"roof: {peak:.1f} GOPS, {bw:.2f} GB/s")
        for r in pts:
            ax.scatter(r.intensity, r.gops, s=max(12.0, r.macs / 2e6), alpha=0.7)
            ax.annotate(r.node, (r.intensity, r.gops), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (ops per DRAM byte)")
        ax.set_ylabel("achieved GOPS")
        ax.set_title(f"roofline, {cfg.label} at {cfg.clock_mhz:g} MHz ({self.device})")
        ax.legend(loc="lower right")
        ax.grid(True, which="both", alpha=0.3)
        return save_figure(fig, path)


QDQ_NOTE_LINES = 12
"""How many of a quantized model's scale notes a compile prints (a real network has one per tensor and weight)."""


def calibration_lines(notes: QuantNotes) -> list[str]:
    """What a compile's calibration did beyond the per-tensor method, as lines for a person: the
    exponent search, a quantized model's own scales (qdq.py), the layers kept in float automatically."""
    lines = recipe_lines(notes)
    if (s := notes.search) is not None:
        lines.append(f"exponent search: output error on the calibration samples {s.error_before:.5f} -> "
                     f"{s.error_after:.5f}; {len(s.moved)} of {s.groups} exponent groups moved "
                     f"({s.evaluations} evaluations, {s.seconds:.1f} s)")
    if isinstance(r := notes.range_scale, ModelFactors):  # a QDQ model's own scales met (range_scale.plan_model_factors)
        lines.append(f"range scaling: {len(r.model_factors)} of the model's activation tensors rescaled onto "
                     "its own scales (factors in module.notes.calibration.range_scale)")
    elif r is not None:
        lines.append(f"range scaling: {len(r.factors)} of {r.groups} activation groups rescaled "
                     f"({r.fixed} cannot be), mean fill of the int8 range {r.mean_fill_before:.3f} -> "
                     f"{r.mean_fill_after:.3f}")
    if notes.channel_fill is not None:
        lines.append(notes.channel_fill.summary())
    if notes.gptq is not None:
        lines.append(notes.gptq.summary())
    if (q := notes.qdq) is not None:
        lines.append(f"model scales kept: {q.activations} activation tensors, weights of {len(q.weights)} nodes"
                     f" ({'all powers of two' if q.exact else 'some moved to a power of two'})")
        lines += [f"  {line}" for line in q.notes[:QDQ_NOTE_LINES]]
        if len(q.notes) > QDQ_NOTE_LINES:
            lines.append(f"  ... {len(q.notes) - QDQ_NOTE_LINES} more in module.notes.calibration.qdq.notes")
    if (k := notes.keep_float_auto) is not None:
        lines.append(f"kept in float on the host: {', '.join(k.kept) or 'none'}; mean output cosine on the "
                     f"calibration samples {k.cosine_before:.5f} -> {k.cosine_after:.5f} ({k.seconds:.1f} s)")
    return lines
