"""Compile time of the zoo networks, phase by phase: cold (an empty compile cache), and from the cache.

    python benchmarks/compile_time.py [--models resnet18,mobilenet_v1] [--runs 3] [--samples 4]
                                      [--config pynq] [--json]

Each run is a fresh Python process (nothing warm from an earlier compile: the heuristic's and the depthwise
placement's in-process caches start empty), compiling the zoo network with seeded weights and `--samples`
seeded calibration images as `make demo` does.  A cold run compiles into an empty cache folder of its own
(the key, the compile, the store); a cached run compiles the same model again from the last cold run's
folder.  Phases are wall-clock timers around the pipeline's own steps (compiler/pipeline.py PIPELINE), the
default schedule heuristic (`default_conv_knobs`, inside "fuse" and "lower"), and the cache's key, load
and store; the table shows the median of `--runs` runs per figure, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from vtakit.compiler import cache, pipeline, zoo
from vtakit.compiler.backends.vta import heuristics, ops, packing

NETWORKS = ("digits_cnn", "small_cnn", "mobilenet_v1", "resnet18", "resnet34")
HEURISTIC = "heuristic"
CACHE_PHASES = ("key", "load", "store")


def _timed(times: dict[str, float], name: str, fn):
    """`fn`, adding its wall time to times[name] (the outermost call only, when it recurses)."""
    depth = [0]

    def run(*args, **kwargs):
        depth[0] += 1
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                times[name] = times.get(name, 0.0) + time.perf_counter() - start
    return run


def one_compile(model_name: str, config: str, samples: int) -> dict:
    """Compile one zoo network in this process (the compile cache as the environment sets it), timing phases."""
    times: dict[str, float] = {}
    pipeline.PIPELINE = tuple(replace(step, run=_timed(times, step.name, step.run)) for step in pipeline.PIPELINE)
    knobs = _timed(times, HEURISTIC, heuristics.default_conv_knobs)
    for module in (heuristics, ops, packing):
        setattr(module, "default_conv_knobs", knobs)
    for name in CACHE_PHASES:
        setattr(cache, name, _timed(times, name, getattr(cache, name)))
    model = zoo.build(model_name)  # the zoo seeds its weights (seed 0)
    rng = np.random.default_rng(0)
    shape = zoo.input_shape(model_name)
    calibration = [rng.standard_normal(shape).astype(np.float32) for _ in range(samples)]
    start = time.perf_counter()
    module = pipeline.compile_module(model, config, calibrate=calibration)
    total = time.perf_counter() - start
    return {"total": total, "phases": times, "tasks": len(module.tasks), "accelerator_tasks": len(module.vta_tasks())}


def _child(model_name: str, config: str, samples: int, folder: Path) -> dict:
    command = [sys.executable, __file__, "--child", model_name, "--config", config, "--samples", str(samples)]
    env = dict(os.environ, VTAKIT_COMPILE_CACHE="on", VTAKIT_CACHE_DIR=str(folder))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"error: compiling {model_name} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(model_name: str, config: str, samples: int, runs: int) -> list[dict]:
    """Median rows (cold, cached) for one network."""
    with tempfile.TemporaryDirectory(prefix="vtakit-compile-time-") as tmp:
        cold, cached = [], []
        for i in range(runs):
            folder = Path(tmp) / f"cold{i}"
            cold.append(_child(model_name, config, samples, folder))
        for _ in range(runs):
            cached.append(_child(model_name, config, samples, folder))
    rows = []
    for kind, results in (("cold", cold), ("cached", cached)):
        phases = sorted({p for r in results for p in r["phases"]})
        rows.append({"model": model_name, "run": kind, "runs": len(results),
                     "total_s": statistics.median(r["total"] for r in results),
                     "phases_s": {p: statistics.median(r["phases"].get(p, 0.0) for r in results) for p in phases},
                     "tasks": results[0]["tasks"], "accelerator_tasks": results[0]["accelerator_tasks"]})
    return rows


def print_table(rows: list[dict]) -> None:
    order = [s for s in ("import", "optimize", "precision", "quantize", "partition", "fuse", "order", "lower",
                         HEURISTIC, "plan", "gpu kernels", *CACHE_PHASES) if any(s in r["phases_s"] for r in rows)]
    table = Table(title="compile time, seconds (median of runs; heuristic: inside fuse and lower)")
    for column in ("model", "run", "total", *order):
        table.add_column(column, justify="left" if column in ("model", "run") else "right")
    for r in rows:
        table.add_row(r["model"], r["run"], f"{r['total_s']:.2f}",
                      *(f"{r['phases_s'][p]:.2f}" if p in r["phases_s"] else "-" for p in order))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(NETWORKS), help="zoo networks, comma-separated")
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (each a fresh process)")
    ap.add_argument("--samples", type=int, default=4, help="seeded calibration images")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(one_compile(args.child, args.config, args.samples)))
        return 0
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in NETWORKS]
    if unknown or args.runs < 1 or args.samples < 1:
        ap.error(f"unknown network {unknown[0]!r}; use {', '.join(NETWORKS)}" if unknown
                 else "--runs and --samples must be at least 1")
    rows = [row for m in models for row in measure(m, args.config, args.samples, args.runs)]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
