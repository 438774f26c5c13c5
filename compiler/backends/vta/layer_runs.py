"""The reference layers (`layers`) run on a device: per-layer cycles, utilization and correctness, as
VTA's test_benchmark_topi_conv2d measures them; behind `vtakit bench conv2d|dense` and the tests that
hold the cycle counts.

Each layer runs with random int8 data and VTA's benchmark epilogue (+ bias,
>> 8, clip to [0, 127]) on the chosen device and is checked against the numpy
reference.  The summary weighs layers by their MACs, repeats counted.
"""

from __future__ import annotations

import numpy as np

from vtakit.errors import VtaError
from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.layers import WORKLOADS, ConvLayer
from vtakit.isa.config import HwConfig


def select(workload: str, kind: str, layers: list[str] | None) -> list:
    if workload not in WORKLOADS:
        raise VtaError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    table = WORKLOADS[workload][0 if kind == "conv2d" else 1]
    if not layers:
        return list(table)
    names = {layer.name: layer for layer in table}
    missing = [n for n in layers if n not in names]
    if missing:
        raise VtaError(f"no layer {missing[0]!r} in {workload} ({', '.join(names)})")
    return [names[n] for n in layers]


def run_layer(layer, cfg: HwConfig, device, vthreads: int | None, seed: int = 0) -> dict:
    """One layer on `device`; on the RTL, the same program also runs on the cycle model and
    the row carries `model_cycles` and `model_error_pct` (100 * (model - RTL) / RTL)."""
    row = _run_layer(layer, cfg, device, vthreads, seed)
    if device == "rtl":
        model = _run_layer(layer, cfg, "sim", vthreads, seed)
        row["model_cycles"] = model["cycles"]
        row["model_error_pct"] = round(100 * (model["cycles"] - row["cycles"]) / row["cycles"], 2)
    return row


def _run_layer(layer, cfg: HwConfig, device, vthreads: int | None, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    requant = dict(shift=8, clip=(0, 127))
    if isinstance(layer, ConvLayer):
        x = rng.integers(-128, 128, (layer.batch, layer.c_in, layer.hw, layer.hw), dtype=np.int8)
        w = rng.integers(-128, 128, (layer.c_out, layer.c_in, layer.kernel, layer.kernel), dtype=np.int8)
        b = rng.integers(-(1 << 12), 1 << 12, layer.c_out, dtype=np.int32)
        y, rep = ops.conv2d(x, w, stride=layer.stride, padding=layer.pad, bias=b, config=cfg, device=device,
                            vthreads=vthreads, name=layer.name, **requant)
        expect = reference.conv2d(x, w, layer.stride, layer.pad, b, **requant)
    else:
        x = rng.integers(-128, 128, (layer.batch, layer.c_in), dtype=np.int8)
        w = rng.integers(-128, 128, (layer.c_out, layer.c_in), dtype=np.int8)
        b = rng.integers(-(1 << 12), 1 << 12, layer.c_out, dtype=np.int32)
        y, rep = ops.dense(x, w, bias=b, config=cfg, device=device, vthreads=vthreads, name=layer.name,
                           **requant)
        expect = reference.dense(x, w, bias=b, **requant)
    return {"name": layer.name, "macs": rep.macs, "cycles": rep.cycles, "utilization": rep.utilization,
            "compute_bound": compute_bound(rep.macs, rep.stats, cfg), "gops": rep.gops, "correct": bool(y.dtype == expect.dtype and np.array_equal(y, expect)),
            "repeats": getattr(layer, "repeats", 1), "vta_offloads": getattr(layer, "vta_offloads", True),
            "instructions": rep.instructions, "packing": rep.packing,
            "compile_s": round(rep.compile_s, 3), "run_s": round(rep.run_s, 3), "schedule": rep.schedule}


def compute_bound(macs: int, stats, cfg: HwConfig) -> float | None:
    """The utilization this program would reach if its compute module never waited for a load, a store
    or the memory port: MACs at peak over the compute module's busy cycles (GEMM and reset micro-ops, the
    ALU epilogue, instruction overheads).  Where `utilization` is far below it, the schedule's overlap is
    the limit; where they meet, the compute module's own work is (on VTA's ISA, the epilogue's ALU
    cycles per output entry).  None for devices that count no per-module cycles."""
    compute = stats.modules.get("compute") if stats is not None and stats.modules else None
    if compute is None or not compute.busy:
        return None
    return macs / (compute.busy * cfg.peak_macs_per_cycle)


def summary(rows: list[dict], cfg: HwConfig) -> dict:
    """MAC-weighted utilization and total cycles, repeats counted (over every row given)."""
    timed = [r for r in rows if r["cycles"]]
    macs = sum(r["macs"] * r["repeats"] for r in timed)
    cycles = sum(r["cycles"] * r["repeats"] for r in timed)
    return {"layers": len(rows), "all_correct": all(r["correct"] for r in rows), "total_cycles": cycles,
            "total_macs": macs,
            "weighted_utilization": macs / (cycles * cfg.peak_macs_per_cycle) if cycles else None}
