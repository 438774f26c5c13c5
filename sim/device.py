"""The Device protocol and its simulator implementation.

Everything above the device layer (compiler runtime, tuner, co-simulation)
talks to a `Device`: a HwConfig, a uint8 DRAM, an allocator and `run`.  The
functional and cycle simulators, the RTL and the PYNQ board all implement it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from vtakit.devices import register_device
from vtakit.errors import SimError
from vtakit.isa.config import HwConfig
from vtakit.sim.budget import check_work
from vtakit.sim.cycle import run_cycle
from vtakit.sim.decoded import decode_cached
from vtakit.sim.functional import run_functional
from vtakit.sim.kernels import one_blas_thread
from vtakit.sim.machine import Machine
from vtakit.sim.stats import Counters, RunStats
from vtakit.sim.trace import TraceRecorder
from vtakit.isa.arith import round_up

MODELS = {"functional": "functional", "fsim": "functional", "cycle": "cycle", "sim": "cycle"}


@runtime_checkable
class Device(Protocol):
    config: HwConfig
    dram: np.ndarray

    def alloc(self, nbytes: int, align: int = 4096) -> int: ...

    def run(self, insn_addr: int, insn_count: int, timeout_s: float | None = None) -> RunStats: ...


def model_name(model: str) -> str:
    """Canonical model name ("functional" or "cycle"); aliases fsim and sim."""
    try:
        return MODELS[model]
    except KeyError:
        raise SimError(f"unknown model {model!r}; use one of {', '.join(MODELS)}", field="model") from None


def execute(machine: Machine, insn_addr: int, insn_count: int, *, model: str = "functional",
            trace: "str | Path | None" = None, timeout_s: float | None = None) -> RunStats:
    """Run a program on an existing machine state (its DRAM is modified in place).  Without
    `timeout_s`, a program whose work is beyond the default budget is refused before it runs
    (sim.budget); with it, the run stops after that many seconds."""
    model = model_name(model)
    cfg = machine.cfg
    t0 = time.perf_counter()
    prog = decode_cached(cfg, machine.dram, insn_addr, insn_count)
    check_work(prog, timeout_s, f"{model} model")
    counters = Counters()
    recorder = None
    if trace is not None:
        recorder = TraceRecorder(cfg.clock_mhz, time_unit="cycles" if model == "cycle" else "steps",
                                 title=f"vtakit {model} model, {cfg.label}")
    cycles, modules = None, {}
    machine.deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        with one_blas_thread():
            if model == "cycle":
                cycles, modules = run_cycle(prog, machine, counters, insn_addr, recorder, timeout_s)
            else:
                run_functional(prog, machine, counters, recorder, timeout_s)
    finally:  # a trace of a run that deadlocked is the best way to see why
        trace_path = recorder.write(trace) if recorder is not None else None
    return RunStats(config=cfg, model=model, cycles=cycles, insns=counters.insns,
                    gemm_uops=counters.gemm_uops, gemm_reset_uops=counters.gemm_reset_uops,
                    alu_uops=counters.alu_uops, bytes_read=counters.bytes_read,
                    bytes_written=counters.bytes_written, modules=modules,
                    wall_s=time.perf_counter() - t0, trace_path=trace_path)


class SimDevice:
    """A simulated accelerator with its own DRAM; on-chip state persists across runs."""

    def __init__(self, config: HwConfig, *, model: str = "cycle", dram_bytes: int = 256 << 20):
        self.config = config
        self.model = model_name(model)
        self.dram = np.zeros(dram_bytes, dtype=np.uint8)
        self.machine = Machine(config, self.dram)
        self._top = 0
        self.trace: "str | Path | None" = None
        """Set to a path to write a Chrome trace of the next runs."""

    def alloc(self, nbytes: int, align: int = 4096) -> int:
        """Bump allocation of DRAM; returns the byte address."""
        addr = round_up(self._top, align)
        if addr + nbytes > self.dram.size:
            raise SimError(f"out of device memory: {nbytes} bytes requested, "
                           f"{self.dram.size - addr} free", field="dram")
        self._top = addr + nbytes
        return addr

    def reset_alloc(self) -> None:
        """Forget all allocations (the memory keeps its contents)."""
        self._top = 0

    def run(self, insn_addr: int, insn_count: int, timeout_s: float | None = None) -> RunStats:
        return execute(self.machine, insn_addr, insn_count, model=self.model, trace=self.trace,
                       timeout_s=timeout_s)


def _register() -> None:
    functional = "the functional simulator (results, no cycles)"
    cycle = "the cycle-level simulator"
    for name, model, text in (("fsim", "functional", functional), ("sim", "cycle", cycle),
                              ("functional", "functional", functional), ("cycle", "cycle", cycle)):
        register_device(name, lambda cfg, model=model, **options: SimDevice(cfg, model=model, **options),
                        description=text, counts_cycles=model == "cycle")


_register()

