"""What `vtakit explore` writes: the records as CSV, the Pareto fronts as a PNG, a one-page summary.

The CSV holds every point, failures included, with the reason in its own
column; the plot and the summary read the same records, so the three cannot
disagree.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from vtakit.hw.synth import PARTS
from vtakit.scheduling.explore import ExploreResult, pareto_front
from vtakit.tables import save_figure

PANELS = (("lut", "LUT"), ("bram36", "BRAM36"), ("dsp", "DSP48"))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_csv(result: ExploreResult, path: str | Path) -> Path:
    path = Path(path)
    columns: list[str] = []
    for r in result.records:
        columns += [k for k in r if k not in columns]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in result.records:
            w.writerow([_cell(r.get(k)) for k in columns])
    return path


def _latency_key(records: Sequence[dict]) -> str:
    """Latency at the achievable clock when the points have a timing estimate, else at the asked one."""
    return "latency_ms_achievable" if any(r.get("latency_ms_achievable") is not None for r in records) \
        else "latency_ms"


def _label_groups(pts: Sequence[dict], key: str, lat: str = "latency_ms") -> dict[tuple[float, float], list[int]]:
    """Points that would print on top of each other (within 2 % of the axes' spans) share one label."""
    xs, ys = [r[key] for r in pts], [math.log(r[lat]) for r in pts]
    dx, dy = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    groups: dict[tuple[float, float], list[int]] = {}
    for r, x, y in zip(pts, xs, ys):
        near = next((g for g in groups if abs(g[0] - x) < 0.02 * dx and abs(math.log(g[1]) - y) < 0.02 * dy), None)
        groups.setdefault(near or (x, r[lat]), []).append(r["index"])
    return groups


def plot_pareto(result: ExploreResult, path: str | Path) -> Path | None:
    """Latency against LUT, BRAM36 and DSP48, one panel each, its 2-D front drawn; None without resources."""
    pts = [r for r in result.records if r["status"] == "ok" and r.get("lut") is not None]
    if not pts:
        return None
    matplotlib.use("Agg")

    lat = _latency_key(pts)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(15, 4.8), sharey=True)
    by_index = {r["index"]: r for r in pts}
    for ax, (key, label) in zip(axes, PANELS):
        front = sorted((by_index[i] for i in pareto_front(pts, (lat, key))), key=lambda r: r[key])
        ax.scatter([r[key] for r in pts], [r[lat] for r in pts], s=28, color="#9aa5b1",
                   label="configurations", zorder=2)
        ax.plot([r[key] for r in front], [r[lat] for r in front], "-o", color="#d1495b", ms=7,
                drawstyle="steps-post", label="Pareto front", zorder=3)
        for (x, y), indices in _label_groups(pts, key, lat).items():
            ax.annotate(",".join(f"#{i}" for i in indices), (x, y), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
        for name in result.parts:  # capacity of each part, where it is in view
            cap = getattr(PARTS[name], key)
            if cap <= 1.6 * max(r[key] for r in pts):
                ax.axvline(cap, color="#4f6d7a", ls="--", lw=0.8)
                ax.text(cap, 0.98, f" {name}", rotation=90, va="top", fontsize=7, color="#4f6d7a",
                        transform=ax.get_xaxis_transform())
        ax.set_xlabel(f"{label} (Yosys, {PARTS[result.primary_part].family} mapping)")
        ax.grid(True, which="both", alpha=0.3)
    latencies = [r[lat] for r in pts]
    if max(latencies) > 5 * min(latencies):
        axes[0].set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        axes[0].yaxis.set_major_formatter(plain)
        axes[0].yaxis.set_minor_formatter(plain)
    axes[0].set_ylabel(f"{result.network} latency on the cycle model (ms)"
                       + (", at the achievable clock" if lat != "latency_ms" else ""))
    axes[0].legend(loc="best", fontsize=8, framealpha=0.9)
    fig.suptitle(f"design-space exploration: {result.network}, {len(result.records)} configurations "
                 f"({len(pts)} measured and synthesized)")
    return save_figure(fig, path)


def _fmt(value: Any, spec: str = "") -> str:
    if value is None or value == "":
        return "-"
    return format(value, spec) if spec else str(value)


def _clock_cell(r: dict) -> str:
    """Estimated fmax, marked when the asked clock exceeds it."""
    if r.get("fmax_mhz") is None:
        return "-"
    return f"{r['fmax_mhz']:.0f}" + ("" if r["clock_ok"] else f" (< {r['clock_mhz']:g}: at {r['achievable_mhz']:.0f})")


def _table(records: Sequence[dict], have_resources: bool) -> list[str]:
    timed = any(r.get("fmax_mhz") is not None for r in records)
    head = ["#", "point", "config", "latency ms", "util %", "cosine"]
    if timed:
        head += ["est. fmax MHz", "latency ms at achievable clock"]
    if have_resources:
        head += ["LUT", "FF", "BRAM36", "DSP", "smallest part", "Pareto"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        util = 100 * r["utilization"] if r.get("utilization") is not None else None
        row = [str(r["index"]), r["point"], r["config"] or "-", _fmt(r["latency_ms"], ".2f"), _fmt(util, ".1f"),
               _fmt(r.get("cosine"), ".4f")]
        if timed:
            row += [_clock_cell(r), _fmt(r.get("latency_ms_achievable"), ".2f")]
        if have_resources:
            row += [_fmt(r.get("lut"), ","), _fmt(r.get("ff"), ","), _fmt(r.get("bram36"), "g"),
                    _fmt(r.get("dsp"), ","), _fmt(r.get("smallest_part")), "yes" if r["pareto"] else ""]
        if r["status"] != "ok":
            row[1] += f" (failed: {r['failed_stage']})"
        lines.append("| " + " | ".join(row) + " |")
    return lines


def write_summary(result: ExploreResult, path: str | Path, *, space: str = "", plot: Path | None = None) -> Path:
    recs = result.records
    have_resources = any(r.get("lut") is not None for r in recs)
    ok = [r for r in recs if r["status"] == "ok"]
    failed = [r for r in recs if r["status"] != "ok"]
    lines = [f"# Design-space exploration: {result.network}", ""]
    lines.append(f"{len(recs)} configurations{f' from `{space}`' if space else ''}: {len(ok)} complete, "
                 f"{len(failed)} failed. Latency: accelerator cycles of one run on the cycle model at the "
                 f"configuration's clock (host tasks excluded). "
                 + (f"Resources: Yosys `synth_xilinx`, the {PARTS[result.primary_part].family} mapping (the "
                    f"{result.primary_part}'s family; families synthesized: {', '.join(result.families)}); fit checked "
                    f"on {', '.join(result.parts)}." if have_resources else "No synthesis (resources not estimated)."))
    lines += ["", *_table(recs, have_resources), ""]
    timed = any(r.get("fmax_mhz") is not None for r in recs)
    lat = "latency_ms_achievable" if timed else "latency_ms"
    front = sorted((r for r in recs if r["pareto"]), key=lambda r: r[lat])
    keys = ("latency at the achievable clock" if timed else "latency") + \
        (", LUT, BRAM36 and DSP" if have_resources else "")
    lines.append(f"## Pareto set ({keys})")
    lines.append("")
    for r in front:
        res = (f", {r['lut']:,} LUT, {r['bram36']:g} BRAM36, {r['dsp']:,} DSP, smallest part "
               f"{r['smallest_part']}") if have_resources else ""
        at = f" at {r['achievable_mhz']:g} MHz" if timed else ""
        lines.append(f"- #{r['index']} {r['point']} ({r['config']}): {r[lat]:.2f} ms{at}{res}")
    if not front:
        lines.append("- none (no point completed)")
    if have_resources:
        lines += ["", "## Fastest configuration per part", ""]
        for name in result.parts:
            fits = [r for r in ok if r.get(f"fits_{name}") == "yes"]
            best = min(fits, key=lambda r: r[lat], default=None)
            lines.append(f"- {name}: " + (f"#{best['index']} {best['point']} ({best['config']}), "
                                          f"{best[lat]:.2f} ms" if best else "nothing fits"))
    lines += ["", "## Failures", ""]
    for r in failed:
        lines.append(f"- #{r['index']} {r['point']}: {r['failed_stage']}: {r['reason']}")
    if not failed:
        lines.append("- none")
    secs = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(result.stage_seconds.items()))
    reused = f" ({result.reused_jobs} jobs taken from the job log of an earlier run)" if result.reused_jobs else ""
    in_jobs = f"; time in jobs: {secs}." if secs else "."
    lines += ["", "## Notes", "", f"- Wall time {result.wall_s:.0f} s{reused}{in_jobs}",
              ("- Latency is a cycle-model figure; the cycle model agrees with the RTL within 0.25 % on ResNet "
               "layers (docs/results.md).")]
    if have_resources:
        timing_note = ("- Estimated fmax: hw.timing's static timing of the xc7 netlist (7-series -1 cell delays, "
                       "0.5 ns per net for routing; x 0.6 for UltraScale+), not a place and route; a point whose "
                       "clock exceeds it is marked and its latency is taken at the estimated fmax (the asked clock "
                       "stays in the CSV's `clock_mhz`)." if timed else
                       "- No timing estimate: each clock is the configuration's, not a timing result.")
        lines += [timing_note, "- LUT counts are Yosys's and differ from Vivado's by some percent.",
                  ("- Configurations differing only in clock, memory latency or board share one netlist "
                   "(the CSV's `netlist` column names the configuration synthesized).")]
    if plot is not None:
        lines += ["", f"![Pareto fronts]({plot.name})"]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path


def write_outputs(result: ExploreResult, out_dir: str | Path, *, space: str = "") -> dict[str, Path]:
    """explore.csv, pareto.png (when resources were estimated) and summary.md in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"csv": write_csv(result, out / "explore.csv")}
    png = plot_pareto(result, out / "pareto.png")
    if png is not None:
        files["png"] = png
    files["summary"] = write_summary(result, out / "summary.md", space=space, plot=png)
    return files
