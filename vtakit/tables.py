"""How results are shown: rich tables that also print as text from Python (configurations, run
statistics, a module's report) and `save_figure`, which writes every figure the tools make.  (A
network's report itself is vtakit.compiler.module.report.)"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vtakit.errors import pc_side_missing
from vtakit.isa.config import HwConfig
from vtakit.sim.stats import RunStats

try:
    import matplotlib.pyplot as plt
except ImportError as missing:  # a board's runtime prints tables; only figures need matplotlib
    pc_side_missing(missing)


class TextTable(Table):
    """A rich Table that also prints from Python: `print(module.report().table())` shows the table as
    text (no colour codes) instead of `<rich.table.Table object>`; a rich Console renders it as before."""

    def __str__(self) -> str:
        width = shutil.get_terminal_size((140, 24)).columns if sys.stdout.isatty() else 140
        text = Console(width=width, color_system=None, force_terminal=False, highlight=False)
        with text.capture() as captured:
            text.print(self)
        return captured.get().rstrip("\n")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def config_table(cfg: HwConfig) -> TextTable:
    table = TextTable(title=f"configuration {cfg.label}", show_header=True)
    table.add_column("parameter")
    table.add_column("value", justify="right")
    for key, value in cfg.summary().items():
        table.add_row(key, _fmt(value))
    return table


def presets_table(presets: dict[str, HwConfig]) -> TextTable:
    table = TextTable(title="presets")
    for col in ("name", "target", "GEMM", "clock MHz", "bus B/cycle", "peak GOPS", "inp/wgt/acc depth",
                "MUL"):
        table.add_column(col, justify="right" if col not in ("name", "target") else "left")
    for name, c in presets.items():
        table.add_row(name, c.target, f"{c.batch}x{c.block_in}x{c.block_out}", _fmt(c.clock_mhz),
                      str(c.bus_bytes), _fmt(c.peak_gops), f"{c.inp_depth}/{c.wgt_depth}/{c.acc_depth}",
                      "yes" if c.alu_mul else "no")
    return table


def stats_tables(stats: RunStats) -> list[TextTable]:
    """A summary table and, for timed models, a per-module cycle breakdown."""
    summary = TextTable(title=f"{stats.model} model, config {stats.config.label}", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    rows = [("instructions executed", stats.insns)]
    if stats.cycles is not None:
        rows += [("cycles", stats.cycles),
                 ("time at clock (ms)", stats.seconds * 1e3),
                 ("GEMM utilization", f"{stats.utilization * 100:.1f} %"),
                 ("GOPS", stats.gops)]
    rows += [("GEMM micro-ops (MAC)", stats.gemm_uops), ("GEMM reset micro-ops", stats.gemm_reset_uops),
             ("ALU micro-ops", stats.alu_uops), ("MACs", stats.macs)]
    rows += [(f"bytes read {k}", v) for k, v in sorted(stats.bytes_read.items())]
    rows += [(f"bytes written {k}", v) for k, v in sorted(stats.bytes_written.items())]
    rows += [("wall time (s)", stats.wall_s)]
    if stats.sim_uops_per_s:
        rows.append(("simulated GEMM micro-ops / s", stats.sim_uops_per_s))
    for k, v in rows:
        summary.add_row(k, _fmt(v))
    tables = [summary]
    if stats.modules:
        mods = TextTable(title="cycles per module")
        for col in ("module", "insns", "busy", "stall token", "stall memory", "stall queue", "idle",
                    "busy %"):
            mods.add_column(col, justify="left" if col == "module" else "right")
        for name, m in stats.modules.items():
            share = 100.0 * m.busy / stats.cycles if stats.cycles else 0.0
            mods.add_row(name, _fmt(m.insns), _fmt(m.busy), _fmt(m.stall_token), _fmt(m.stall_memory),
                         _fmt(m.stall_queue), _fmt(m.idle), f"{share:.1f}")
        tables.append(mods)
    return tables


def save_figure(fig, path) -> Path:
    """Lay out, write (creating the folder) and close a matplotlib figure: every PNG the tools write."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
