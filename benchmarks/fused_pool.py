"""The max pool after conv1 fused into conv1's accelerator task (graph/fusion.py, lowering/pool.py), on pynq.

`make demo`'s calibration and input (seeded), each model compiled with the fusion on and off
(`PartitionOptions(fuse_pool=False)`); for each: accelerator cycles of conv1, of the pool and of the
whole network, tasks, and whether the logits agree bit for bit: fused vs unfused, and the fused
module on device="cpu" (the host reference), "fsim" and "sim".

    .venv/bin/python benchmarks/fused_pool.py [resnet18 resnet34]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from vtakit.compiler import zoo
from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.passes.partition import PartitionOptions
from vtakit.isa import HwConfig


def _cycles(module) -> dict[str, int]:
    return {r.node: r.cycles for r in module.report().rows if r.place == "vta"}


def main(models: list[str]) -> None:
    pynq = HwConfig.preset("pynq")
    for name in models:
        rng = np.random.default_rng(0)
        samples = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(4)]
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        model = zoo.build(name, seed=0)
        runs = {}
        for fused in (False, True):
            t0 = time.perf_counter()
            module = compile_module(model, pynq, calibrate=samples, partition_options=PartitionOptions(fuse_pool=fused))
            logits = module.run(x, device="sim")["logits"]
            cyc = _cycles(module)
            runs[fused] = (module, logits)
            pool = cyc.get("maxpool", 0)
            print(f"{name} fuse_pool={fused}: {sum(cyc.values()):,} cycles, conv1 {cyc['conv1']:,}"
                  f"{f', maxpool {pool:,}' if pool else ' (pool fused)'}, conv1+pool {cyc['conv1'] + pool:,}, "
                  f"{len(module.vta_tasks())} accelerator tasks ({time.perf_counter() - t0:.0f} s)", flush=True)
        module, logits = runs[True]
        same = {"unfused sim": np.array_equal(runs[False][1], logits)}
        for device in ("cpu", "fsim"):
            same[device] = np.array_equal(module.run(x, device=device)["logits"], logits)
        print(f"{name}: fused sim logits bit-identical to " + ", ".join(f"{k}: {v}" for k, v in same.items()),
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet18", "resnet34"])
