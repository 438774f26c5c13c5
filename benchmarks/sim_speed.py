"""Simulator speed: GEMM micro-ops per second on the functional and cycle models.

Runs a ~2 M micro-op convolution-shaped program and a ResNet-18-sized stream
(~7 M micro-ops) and prints one row per (program, model).  Same as
`vtakit bench sim`; extra arguments are passed through (e.g. --config 1x32, --json).

`--resnet18 [--repeat N] [--module PATH]`: one ResNet-18 inference as `make demo`
compiles it (seeded weights, 4 seeded calibration images), run on the cycle model
(device="sim", a fresh device per run); compiled once (or loaded from PATH, saved
there if missing), `run` timed N times.  Prints wall and CPU seconds per run and the
work behind them: instructions dispatched, plan-cache hits and misses, cycles, DRAM
bytes, so a figure taken on a busy machine can still be judged.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from vtakit.cli import main


def _module(path: str | None):
    from vtakit.compiler import zoo
    from vtakit.compiler.pipeline import compile_module
    from vtakit.compiler.module.compiled import CompiledModule
    from vtakit.isa.config import DEFAULT_PRESET, HwConfig

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


if __name__ == "__main__":
    if "--resnet18" in sys.argv:
        ap = argparse.ArgumentParser(description="time one ResNet-18 inference on the cycle model")
        ap.add_argument("--resnet18", action="store_true")
        ap.add_argument("--repeat", type=int, default=3)
        ap.add_argument("--module", help="a saved module to load (written there when missing)")
        args = ap.parse_args()
        resnet18(args.repeat, args.module)
        raise SystemExit(0)
    raise SystemExit(main(["bench", "sim", *sys.argv[1:]]))
