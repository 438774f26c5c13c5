"""Fit the default heuristic's `CostFit` to measured cycles: how `heuristics.FIT` was derived.

For every candidate fit (a small grid of `imbalance`, `tile_stall` and the thread counts searched), the
heuristic picks knobs for ResNet-18's C2-C11 (VTA's benchmark epilogue, `pynq`); each pick is run on the
cycle model, and the fit with the fewest total cycles (repeats counted) wins.  The tuner's best knobs
from the log (`tuned_resnet18_pynq.jsonl`) run on today's compiler beside them, so the table says how far
each layer's default is from tuned.

    .venv/bin/python benchmarks/fit_heuristic.py [--log benchmarks/tuned_resnet18_pynq.jsonl]
"""

from __future__ import annotations

import argparse
import json
from itertools import product
from pathlib import Path

import numpy as np

from vtakit.compiler.backends.vta import ops
from vtakit.compiler.backends.vta.heuristics import CostFit, conv_shape, default_conv_knobs
from vtakit.compiler.backends.vta.layers import RESNET18
from vtakit.isa.config import HwConfig

GRID = {"imbalance": (0.0, 0.5, 1.0), "tile_stall": (0.0, 0.25, 0.5), "vthreads": ((2, 1), (4, 3, 2, 1), (4, 2, 1))}


def measure(cfg: HwConfig, layer, knobs: dict, cache: dict) -> int:
    key = (layer.name, json.dumps(knobs, sort_keys=True))
    if key not in cache:
        rng = np.random.default_rng(0)
        x = rng.integers(-128, 128, (1, layer.c_in, layer.hw, layer.hw), dtype=np.int8)
        w = rng.integers(-128, 128, (layer.c_out, layer.c_in, layer.kernel, layer.kernel), dtype=np.int8)
        b = rng.integers(-(1 << 12), 1 << 12, layer.c_out, dtype=np.int32)
        _, rep = ops.conv2d(x, w, stride=layer.stride, padding=layer.pad, bias=b, shift=8, clip=(0, 127),
                            config=cfg, schedule=knobs)
        cache[key] = rep.cycles
    return cache[key]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", default=str(Path(__file__).with_name("tuned_resnet18_pynq.jsonl")))
    args = ap.parse_args()
    cfg = HwConfig.preset("pynq")
    layers = RESNET18[1:]
    tuned = {r["task"]: r["schedule"] for r in map(json.loads, Path(args.log).read_text().splitlines())}
    cache: dict = {}
    tuned_cycles = {l.name: measure(cfg, l, tuned[l.name], cache) for l in layers if l.name in tuned}
    results = []
    for imbalance, sync, vts in product(*GRID.values()):
        fit = CostFit(imbalance, sync, vts)
        picks = {}
        for l in layers:
            s = conv_shape(cfg, n=1, c_in=l.c_in, h=l.hw, w=l.hw, c_out=l.c_out, kh=l.kernel, kw=l.kernel,
                           stride=l.stride, pad=l.pad, epilogue_ops=4, planes=1, vectors=0, bias_wgt=True)
            picks[l.name] = measure(cfg, l, default_conv_knobs(cfg, s, None, fit).to_dict(), cache)
        total = sum(picks[l.name] * l.repeats for l in layers)
        results.append((total, fit, picks))
        print(f"{fit}: {total:,} cycles", flush=True)
    total, fit, picks = min(results, key=lambda r: r[0])
    macs = sum(l.macs * l.repeats for l in layers)
    print(f"\nbest: {fit}\n{'layer':6} {'default':>9} {'tuned knobs':>12} {'default/tuned':>14}")
    for l in layers:
        t = tuned_cycles.get(l.name)
        print(f"{l.name:6} {picks[l.name]:>9,} {t or 0:>12,} {picks[l.name] / t if t else float('nan'):>14.3f}")
    tuned_total = sum(tuned_cycles[l.name] * l.repeats for l in layers if l.name in tuned_cycles)
    print(f"C2-C11: default {total:,} cycles ({macs / (total * cfg.peak_macs_per_cycle):.1%}), "
          f"tuned knobs {tuned_total:,} ({macs / (tuned_total * cfg.peak_macs_per_cycle):.1%})")


if __name__ == "__main__":
    main()
