"""Measurement: compile a candidate schedule, run it on a Device, return cycles or why not.

`measure_conv` is the job every Executor runs (a module-level function with
plain-data arguments, so process pools and Dask workers can take it).  The
data is seeded from the task, so a schedule's result is reproducible anywhere;
with `check` the output is compared with numpy's convolution and a wrong
result is a failure, not a fast schedule.  A run stopped by its wall-clock time
limit says nothing about the schedule (the machine may have been busy): it comes
back `transient`, which the tuner does not log; a refusal by the program's own
budget (BudgetExceeded) is the same everywhere, a result like any other failure.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from zlib import crc32

import numpy as np

from vtakit.compiler.backends.vta import ops, reference
from vtakit.devices import ACCELERATOR, device_names
from vtakit.errors import BudgetExceeded, DeviceTimeout, VtaError
from vtakit.scheduling.task import ConvTask


def measurement_devices() -> tuple[str, ...]:
    """Registered accelerator devices that count cycles: sim (the cycle model, default), rtl, pynq (a board:
    run the measuring Dask worker on it), pynq-sim (the simulated board), and any device registered later."""
    return device_names(ACCELERATOR, counts_cycles=True)


@dataclass(frozen=True)
class MeasureResult:
    cycles: int | None
    error: str | None
    compile_s: float
    run_s: float
    transient: bool = False
    """The run ran out of wall-clock time: not a property of the schedule, so not a result."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=8)
def task_data(task: ConvTask) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seeded inputs (x, w, bias) and numpy's result for a task; cached per worker process."""
    rng = np.random.default_rng(crc32(task.key.encode()))
    x = rng.integers(-128, 128, task.x_shape, dtype=np.int8)
    w = rng.integers(-128, 128, task.w_shape, dtype=np.int8)
    b = rng.integers(-(1 << 12), 1 << 12, task.c_out, dtype=np.int32)
    expect = reference.conv2d(x, w, task.stride, task.pad, b, shift=task.shift, clip=task.clip)
    return x, w, b, expect


def measure_conv(task: ConvTask, knobs: dict, device: str = "sim", check: bool = True,
                 timeout_s: float | None = 120.0) -> MeasureResult:
    """Compile `task` with `knobs` and run it; every failure comes back as a reason, never raised."""
    t0 = time.perf_counter()
    try:
        x, w, b, expect = task_data(task)
        y, rep = ops.conv2d(x, w, stride=task.stride, padding=task.pad, bias=b, shift=task.shift,
                            clip=task.clip, config=task.cfg, device=device, schedule=dict(knobs),
                            timeout_s=timeout_s, name=task.name)
    except VtaError as e:
        transient = isinstance(e, DeviceTimeout) and not isinstance(e, BudgetExceeded)
        return MeasureResult(None, f"{type(e).__name__}: {e}", time.perf_counter() - t0, 0.0, transient)
    if check and not np.array_equal(y, expect):
        wrong = int(np.count_nonzero(y != expect))
        return MeasureResult(None, f"WrongResult: {wrong} of {y.size} outputs differ from numpy",
                             rep.compile_s, rep.run_s)
    if rep.cycles is None:
        return MeasureResult(None, f"DeviceError: device {device!r} counts no cycles", rep.compile_s, rep.run_s)
    return MeasureResult(int(rep.cycles), None, rep.compile_s, rep.run_s)


@dataclass(frozen=True)
class Measurer:
    """How candidates are measured: which device, whether results are checked, the time limit."""

    device: str = "sim"
    check: bool = True
    timeout_s: float | None = 120.0

    def __post_init__(self) -> None:
        if self.device not in measurement_devices():
            raise VtaError(f"unknown measurement device {self.device!r}; use one of "
                           f"{', '.join(measurement_devices())}")

    def submit(self, executor, task: ConvTask, knobs: dict):
        """A Future of the MeasureResult."""
        return executor.submit(measure_conv, task, knobs, self.device, self.check, self.timeout_s)
