"""RunStats: what a device reports about one run.

Counters every device fills (instructions, micro-ops, bytes moved) plus, for
devices that count time, cycles and per-module busy / stall / idle cycles.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId

MODULE_NAMES = ("fetch", "load", "compute", "store")
_MEM_NAMES = [m.name for m in MemId]


@dataclass
class ModuleStats:
    """Cycle accounting of one module; the five counters add up to the run's cycles."""

    insns: int = 0
    busy: int = 0
    stall_token: int = 0
    """Waiting for a dependency token to pop, or for room to push one."""
    stall_memory: int = 0
    """Waiting for the shared memory port."""
    stall_queue: int = 0
    """Fetch only: waiting for room in a full command queue."""
    idle: int = 0
    """No instruction to work on."""


@dataclass
class Counters:
    """Work done, counted by the executor; shared by every model."""

    insns: int = 0
    gemm_uops: int = 0
    gemm_reset_uops: int = 0
    alu_uops: int = 0
    bytes_read: dict[str, int] = field(default_factory=dict)
    bytes_written: dict[str, int] = field(default_factory=dict)

    def read(self, mem: int, nbytes: int) -> None:
        key = _MEM_NAMES[mem]
        self.bytes_read[key] = self.bytes_read.get(key, 0) + nbytes

    def wrote(self, mem: int, nbytes: int) -> None:
        key = _MEM_NAMES[mem]
        self.bytes_written[key] = self.bytes_written.get(key, 0) + nbytes


@dataclass
class RunStats:
    config: HwConfig
    model: str
    cycles: int | None
    insns: int
    gemm_uops: int
    """GEMM micro-ops that multiply-accumulate (reset micro-ops are counted apart)."""
    gemm_reset_uops: int
    alu_uops: int
    bytes_read: dict[str, int]
    bytes_written: dict[str, int]
    modules: dict[str, ModuleStats] = field(default_factory=dict)
    wall_s: float = 0.0
    trace_path: str | None = None

    @property
    def macs(self) -> int:
        return self.gemm_uops * self.config.peak_macs_per_cycle

    @property
    def utilization(self) -> float | None:
        """MACs / (cycles x peak MACs per cycle)."""
        return self.gemm_uops / self.cycles if self.cycles else None

    @property
    def seconds(self) -> float | None:
        """Accelerator time at the configured clock."""
        return self.cycles / (self.config.clock_mhz * 1e6) if self.cycles is not None else None

    @property
    def gops(self) -> float | None:
        return 2 * self.macs / self.seconds / 1e9 if self.seconds else None

    @property
    def bytes_moved(self) -> int:
        return sum(self.bytes_read.values()) + sum(self.bytes_written.values())

    @property
    def sim_uops_per_s(self) -> float | None:
        """Simulator speed: GEMM micro-ops simulated per wall-clock second."""
        return self.gemm_uops / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "config"}
        out["config"] = self.config.label
        out.update(macs=self.macs, utilization=self.utilization, seconds=self.seconds,
                   gops=self.gops, bytes_moved=self.bytes_moved)
        return out
