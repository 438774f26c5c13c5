"""Simulator speed: GEMM micro-ops per second on the functional and cycle models (and the RTL).

Two programs shaped like compiled convolutions (`vtakit.sim.workloads`): one of about 2 M GEMM
micro-ops in large tiles, and a ResNet-18-sized stream of about 7 M micro-ops in smaller tiles
(more instructions, as a compiler would emit).  One row per (program, model), each output checked
against numpy:

    python benchmarks/sim_speed.py [--config 1x32] [--programs gemm-2M] [--models cycle,rtl] [--json]

`--resnet18 [--repeat N] [--module PATH]`: one ResNet-18 inference as `make demo`
compiles it (seeded weights, 4 seeded calibration images), run on the cycle model
(device="sim", a fresh device per run); compiled once (or loaded from PATH, saved
there if missing), `run` timed N times.  Prints wall and CPU seconds per run and the
work behind them: instructions dispatched, plan-cache hits and misses, cycles, DRAM
bytes, so a figure taken on a busy machine can still be judged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from vtakit.errors import VtaError
from vtakit.isa.arith import ceil_div
from vtakit.isa.config import HwConfig
from vtakit.sim import run_image
from vtakit.sim.workloads import ConvTile, conv_tiles_expected, conv_tiles_program

PROGRAMS = {
    "gemm-2M": (ConvTile(rows=14, cols=14, cin_blocks=4, cout_blocks=2, kernel=3), 2_000_000),
    "resnet18-sized": (ConvTile(rows=7, cols=14, cin_blocks=4, cout_blocks=2, kernel=3), 7_000_000),
}


def sim_speed(cfg: HwConfig, programs: list[str], models: list[str]) -> list[dict]:
    """Run each program on each model; one result row per run."""
    rows = []
    for name in programs:
        tile, uops = PROGRAMS[name]
        image = conv_tiles_program(cfg, tile, tiles=ceil_div(uops, tile.gemm_uops))
        expected = conv_tiles_expected(image, tile)
        for model in models:
            stats, dram = run_image(image, model=model)
            rows.append({
                "program": name, "model": stats.model, "instructions": image.insn_count,
                "gemm_uops": stats.gemm_uops, "wall_s": round(stats.wall_s, 3),
                "muops_per_s": round(stats.gemm_uops / stats.wall_s / 1e6, 3),
                "cycles": stats.cycles, "utilization": stats.utilization,
                "correct": bool((image.read("output", dram) == expected).all()),
            })
    return rows


def print_table(title: str, rows: list[dict]) -> None:
    """Rows as a table (floats to three decimals, None as '-')."""
    table = Table(title=title)
    for key in rows[0]:
        table.add_column(key, justify="right")
    for row in rows:
        table.add_row(*("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()))
    Console(width=None if sys.stdout.isatty() else 140).print(table)  # piped: wide enough for every column


def _module(path: str | None):
    from vtakit.compiler import zoo
    from vtakit.compiler.pipeline import compile_module
    from vtakit.compiler.module.compiled import CompiledModule
    from vtakit.isa.config import DEFAULT_PRESET

    if path and Path(path).exists():
        return CompiledModule.load(path)
    rng = np.random.default_rng(0)  # the demo's seeds (vtakit/cli/demo.py)
    samples = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(4)]
    t0 = time.perf_counter()
    module = compile_module(zoo.build("resnet18", seed=0), HwConfig.load(DEFAULT_PRESET), calibrate=samples)
    print(f"compiled in {time.perf_counter() - t0:.1f} s")
    if path:
        module.save(path)
    return module


def resnet18(repeat: int, path: str | None) -> None:
    from vtakit.sim import SimDevice

    module = _module(path)
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    rows = []
    for _ in range(repeat):
        device = SimDevice(module.config, model="cycle")  # what device="sim" opens
        t0, c0 = time.perf_counter(), time.process_time()
        module.run(x, device=device)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = [t.stats for t in module.last_run.tasks if t.stats is not None]
        plans = getattr(device.machine, "plans", None)  # None: a simulator from before the plan cache
        row = (wall, cpu, sum(s.wall_s for s in stats))
        rows.append(row)
        print(f"run {wall:.3f} s wall, {cpu:.3f} s CPU (SimDevice.run {row[2]:.3f} s): "
              f"{sum(s.insns for s in stats):,} instructions dispatched in {len(stats)} runs, "
              + (f"plans {plans.hits:,} hits / {plans.misses} misses, " if plans else "")
              + f"{sum(s.cycles for s in stats):,} cycles, "
              f"{sum(s.bytes_moved for s in stats):,} DRAM bytes")
    print(f"best of {repeat}: {min(r[0] for r in rows):.3f} s wall, {min(r[1] for r in rows):.3f} s CPU, "
          f"SimDevice.run {min(r[2] for r in rows):.3f} s (the first run decodes; later ones reuse it)")


def speed(argv: list[str]) -> int:
    """The two programs on the chosen models, as a table or JSON; 1 if an output was wrong."""
    ap = argparse.ArgumentParser(description="simulator speed on two convolution-shaped programs")
    ap.add_argument("--config", help="preset name or config JSON (default pynq)")
    ap.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated, of: " + ", ".join(PROGRAMS))
    ap.add_argument("--models", default="functional,cycle", help="comma-separated: functional, cycle, rtl")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    programs = args.programs.split(",")
    unknown = [p for p in programs if p not in PROGRAMS]
    if unknown:
        ap.error(f"unknown benchmark program {unknown[0]!r}; known: {', '.join(PROGRAMS)}")
    try:
        cfg = HwConfig.load(args.config)
        rows = sim_speed(cfg, programs, args.models.split(","))
    except VtaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(f"simulator speed (config {cfg.label})", rows)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    if "--resnet18" in sys.argv:
        ap = argparse.ArgumentParser(description="time one ResNet-18 inference on the cycle model")
        ap.add_argument("--resnet18", action="store_true")
        ap.add_argument("--repeat", type=int, default=3)
        ap.add_argument("--module", help="a saved module to load (written there when missing)")
        args = ap.parse_args()
        resnet18(args.repeat, args.module)
        raise SystemExit(0)
    raise SystemExit(speed(sys.argv[1:]))
