"""Issue 40's figures for the transformer models of the corpus: where their MACs go and what they cost, with
the defaults on `pynq` and the cycle model (both halves; the table says which half each model is in).

    python benchmarks/transformer_figures.py                        # every transformer of the corpus (many minutes)
    python benchmarks/transformer_figures.py --only hf_deit_tiny --json out/transformers.json

Per model: the share of its matrix MACs in accelerator tasks (module/macs.py), accelerator cycles and ms at
the config's clock, the utilization of the GEMM tasks (QConv, QDense, QActDense: "GEMM util" is the mean of
each task's utilization weighted by its MACs, "GEMM total" their MACs over their cycles at peak), host ms
measured on this machine, host ms ESTIMATED for the board's ARM core (the report's estimate from operation
counts, compiler/module/board_estimate.py: the rates it assumes are printed under the table), host/accelerator
crossings per attention block (a Softmax of the exported graph), the int8 compile's seconds (the compile
cache off) and the int8 task metric against float (the corpus's floors).  The measurement itself is the
corpus harness's (tests/support/corpus/harness.py): a model that fails a step shows that step and its
one-line reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

_HERE = Path(__file__).resolve()
sys.path.insert(0, str(_HERE.parents[1]))  # the repository's root, for tests.support
# (this file is not named transformers.py: run as a script, benchmarks/ is first on the path, and a
# benchmarks/transformers.py shadowed the transformers package for every script here)

from rich.console import Console  # noqa: E402

from tests.support import corpus  # noqa: E402
from tests.support.corpus.entry import Unavailable  # noqa: E402
from tests.support.corpus.harness import Row, as_dict, measure, reasons  # noqa: E402
from vtakit.compiler.module.macs import module_macs  # noqa: E402
from vtakit.tables import TextTable  # noqa: E402

TRANSFORMERS = ("hf_deit_tiny", "hf_bert_mini", "hf_gpt2_mini", "hf_wav2vec2_mini", "yolos_tiny", "hf_mobilevit_xxs",
                "hf_mobilevit_deeplab", "hf_segformer_b0", "hf_deit_tiny_distilled", "hf_gpt2_2l_seq128",
                "hf_whisper_tiny_encoder")
"""The corpus models with attention blocks."""

GEMM_OPS = ("QConv", "QDense", "QActDense")
"""Accelerator tasks that are matrix work (the GEMM core's utilization is theirs)."""

WIDTH = 260
"""Wide enough for every column unwrapped."""


@dataclass(frozen=True)
class Figures:
    """What this benchmark reads off the int8 module after its cycle-model run (beside the harness's Row)."""

    macs_accelerator: int
    macs_host: int
    accelerator_cycles: int
    accelerator_ms: float
    clock_mhz: float
    gemm_utilization: float | None  # MAC-weighted mean over the GEMM tasks
    gemm_utilization_total: float | None  # their MACs over their cycles x peak
    host_ms: float  # measured here, the cycle-model run's host tasks
    host_ms_board_estimate: float | None  # the report's estimate for the board's ARM core (module/board_estimate.py)
    board_host: str  # which core and rates that estimate assumes
    crossings: int
    attention_blocks: int

    @property
    def accelerator_share(self) -> float:
        total = self.macs_accelerator + self.macs_host
        return self.macs_accelerator / total if total else 0.0

    @property
    def crossings_per_block(self) -> float | None:
        return self.crossings / self.attention_blocks if self.attention_blocks else None


def attention_blocks(path: Path) -> int:
    """Softmax nodes of the exported ONNX graph (one per attention block), counted without loading weights."""
    import onnx  # lazy: only this benchmark reads the ONNX file itself

    model = onnx.load(str(path), load_external_data=False)
    return sum(n.op_type == "Softmax" for n in model.graph.node)


def figures(module, blocks: int) -> Figures:
    """The figures of `module` (int8, after a run on device "sim")."""
    split = module_macs(module)
    rep = module.report()
    gemm = [r for r in rep.rows if r.place == "vta" and r.op in GEMM_OPS and r.cycles and r.macs]
    macs = sum(r.macs for r in gemm)
    weighted = sum(r.macs * (r.utilization or 0.0) for r in gemm) / macs if macs else None
    total = macs / (sum(r.cycles or 0 for r in gemm) * module.config.peak_macs_per_cycle) if gemm else None
    return Figures(split.accelerator, split.host, rep.accelerator_cycles, rep.accelerator_ms,
                   module.config.clock_mhz, weighted, total, rep.host_ms,
                   None if rep.board_host is None else rep.board_host.ms, _assumed(rep.board_host),
                   rep.border_transfers, blocks)


def _assumed(estimate) -> str:
    """What the report's board estimate assumes (its line without its figure), "" without a board."""
    if estimate is None:
        return ""
    c = estimate.cpu
    return (f"the {estimate.board}'s {c.name} ({c.mhz:g} MHz) at {c.gmacs:g} GMAC/s, {c.gbytes:g} GB/s, "
            f"{c.transcendental_ns:g} ns per exp/erf, {c.call_us:g} us per node")


def _f(v, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def table(rows: list[tuple[Row, Figures | None]]) -> TextTable:
    t = TextTable(title="transformers of the model corpus on pynq (defaults, int8, one input on the cycle model)")
    cols = ("model", "half", "MMACs", "% MACs on acc", "acc cycles", "acc ms", "GEMM util %", "GEMM total %",
            "host ms here", "host ms board (est.)", "blocks", "crossings / block", "compile s", "int8 metric",
            "floors met")
    for c in cols:
        t.add_column(c, justify="left" if c in ("model", "half", "int8 metric", "floors met") else "right")
    for r, f in rows:
        metric = ", ".join(f"{k} {v:.4f}" for k, v in r.metric.items() if k in r.floors)
        figs = ["" for _ in range(10)] if f is None else [
            f"{(f.macs_accelerator + f.macs_host) / 1e6:,.0f}", f"{100 * f.accelerator_share:.1f}",
            f"{f.accelerator_cycles:,}", f"{f.accelerator_ms:.1f}",
            _f(None if f.gemm_utilization is None else 100 * f.gemm_utilization, ".1f"),
            _f(None if f.gemm_utilization_total is None else 100 * f.gemm_utilization_total, ".1f"), f"{f.host_ms:.0f}",
            _f(f.host_ms_board_estimate, ",.0f"), f"{f.attention_blocks}", _f(f.crossings_per_block, ".1f")]
        t.add_row(r.name, r.half, *figs, _f(r.compile_s, ".1f"), metric, "yes" if r.passed else "no")
    return t


def run_one(entry) -> tuple[Row, Figures | None]:
    """The harness's row of `entry` and this benchmark's figures (None where the run stopped before them)."""
    seen: list[Figures] = []
    row = measure(entry, inspect=lambda module: seen.append(figures(module, attention_blocks(entry.model()))))
    return row, (seen[0] if seen else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="a model by name (repeatable)")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    os.environ["VTAKIT_COMPILE_CACHE"] = "off"  # compile seconds are a compile's, not a load from the cache
    unknown = sorted(set(args.only) - set(TRANSFORMERS))
    if unknown:
        print(f"error: {unknown[0]!r} is not a transformer of the corpus: {', '.join(TRANSFORMERS)}", file=sys.stderr)
        return 2
    entries = corpus.entries("all", tuple(args.only) or TRANSFORMERS)
    rows: list[tuple[Row, Figures | None]] = []
    for e in entries:
        t0 = time.perf_counter()
        try:
            row, fig = run_one(e)
        except Unavailable as missing:
            row, fig = Row(e.name, e.half, e.kind, e.source, stage="unavailable", reason=str(missing)), None
        rows.append((row, fig))
        print(f"{e.name}: {'pass' if row.passed else '; '.join(row.failures)} ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
    Console(width=WIDTH, color_system=None, highlight=False).print(table(rows))
    for line in sorted({f.board_host for _, f in rows if f is not None and f.board_host}):
        print(f"host ms board (est.): an estimate from operation counts, not a measurement: {line}")
    for line in reasons([r for r, _ in rows]):
        print(line)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        out = [{**as_dict(r), "figures": None if f is None else {**asdict(f), "accelerator_share": f.accelerator_share,
                                                                 "crossings_per_block": f.crossings_per_block}}
               for r, f in rows]
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
