"""What every user-facing operator shares (`ops.py`, `eltwise_ops.py`): argument checks that raise one
CompileError naming the operator, and the report of a run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.codegen import CompiledOp
from vtakit.isa.config import HwConfig
from vtakit.sim.stats import RunStats


@dataclass
class OpReport:
    name: str
    macs: int
    cycles: int | None
    utilization: float | None
    gops: float | None
    bytes_moved: int
    instructions: int
    uop_words: int
    gemm_uops: int
    alu_uops: int
    compile_s: float
    run_s: float
    schedule: dict = field(default_factory=dict)
    stats: RunStats | None = None
    packing: str = "none"      # how the reduction was packed (`packing.py`)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "stats"}


def op_config(config) -> HwConfig:
    return HwConfig.load(config)


def check_array(name: str, op: str, a: np.ndarray, dtype, ndim: int) -> None:
    if not isinstance(a, np.ndarray):
        raise CompileError(f"{name} must be a numpy array, got {type(a).__name__}", op=op)
    if a.dtype != np.dtype(dtype):
        raise CompileError(f"{name} must be {np.dtype(dtype).name}, got {a.dtype}", op=op)
    if a.ndim != ndim:
        raise CompileError(f"{name} must have {ndim} dimensions, got shape {a.shape}", op=op)
    if 0 in a.shape:
        raise CompileError(f"{name} has an empty dimension: shape {a.shape}", op=op)


def requant_args(op: str, shift, clip) -> tuple[int | None, tuple[int, int] | None]:
    if shift is not None and (not isinstance(shift, (int, np.integer)) or not 0 <= shift < 32):
        raise CompileError(f"shift must be an integer in [0, 32), got {shift!r}", op=op)
    if clip is not None:
        if (not isinstance(clip, (tuple, list)) or len(clip) != 2
                or not all(isinstance(v, (int, np.integer)) for v in clip)):
            raise CompileError(f"clip must be a pair of integers (lo, hi), got {clip!r}", op=op)
        lo, hi = clip
        if not (-128 <= lo <= hi <= 127):
            raise CompileError(f"clip must satisfy -128 <= lo <= hi <= 127 for int8 output, got {clip}", op=op)
        clip = (int(lo), int(hi))
    elif shift is not None:
        clip = (-128, 127)  # an int8 result must saturate, not wrap
    return (int(shift) if shift is not None else None), clip


def check_vthreads(op: str, vthreads) -> None:
    if vthreads is not None and (not isinstance(vthreads, (int, np.integer)) or vthreads < 1):
        raise CompileError(f"vthreads must be a positive integer, got {vthreads!r}", op=op)


def knobs_of(schedule, cls):
    if isinstance(schedule, dict):
        try:
            return cls(**schedule)
        except TypeError as e:
            raise CompileError(f"bad schedule knobs: {e}") from None
    return schedule


def op_report(name: str, op: CompiledOp, stats: RunStats, macs: int, compile_s: float, run_s: float,
            schedule) -> OpReport:
    cfg = op.cfg
    cycles = stats.cycles
    util = macs / (cycles * cfg.peak_macs_per_cycle) if cycles else None
    gops = 2 * macs / (cycles / (cfg.clock_mhz * 1e6)) / 1e9 if cycles else None
    sched = schedule.to_dict() if hasattr(schedule, "to_dict") else {"steps": list(map(list, schedule.steps))}
    return OpReport(name, macs, cycles, util, gops, stats.bytes_moved, len(op.insns), len(op.uop_table),
                    stats.gemm_uops, stats.alu_uops, compile_s, run_s, sched, stats)
