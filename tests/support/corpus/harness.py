"""Measuring the compiler on one corpus model, as a user would meet it (issue 39's table).

For each model: compile it as written with the defaults (`vtakit.compile(path, "pynq", calibrate=...)`, int8
for the accelerator) and as float (`target="cpu"`); the float module against onnxruntime (largest
|difference| relative to each output's range); the int8 module (run on the host kernels, its bit-exact
reference) against the float module with the entry's task metric; one test input on the cycle model, which
must give the same bits, for accelerator cycles, utilization, host/accelerator crossings and host time.
A step that fails stops the measurement there and its one-line reason is the row's reason.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tests.support.corpus.entry import FLOAT_ERROR_FLOOR, Entry, Feeds, Outputs, Unavailable
from vtakit.errors import VtaError
from vtakit.tables import TextTable

CONFIG = "pynq"


@dataclass
class Row:
    """One model's measurement; None where the step that measures it did not run."""

    name: str
    half: str
    kind: str
    source: str
    accepted: bool = False  # compiled as written with the defaults, for the accelerator and as float
    stage: str = ""  # the step that failed ("" when every step ran)
    reason: str = ""  # its one line
    float_error: float | None = None  # largest |float module - onnxruntime| / output range
    metric: dict[str, float] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)
    sim_equals_cpu: bool | None = None
    macs_on_accelerator: float | None = None  # fraction of the conv/dense/matmul MACs in accelerator tasks
    macs: int | None = None
    cycles: int | None = None
    utilization: float | None = None
    crossings: int | None = None
    accelerator_tasks: int | None = None
    host_tasks: int | None = None
    host_ms: float | None = None
    compile_s: float | None = None

    @property
    def failures(self) -> list[str]:
        """What keeps this model from passing issue 39's acceptance, one phrase each (empty: it passes)."""
        if not self.accepted or self.stage:
            return [f"{self.stage}: {self.reason}"]
        out = []
        if self.float_error is None or not self.float_error <= FLOAT_ERROR_FLOOR:
            out.append(f"float error {self.float_error:.2e} > {FLOAT_ERROR_FLOOR:g}")
        out += [f"{k} {self.metric.get(k, float('nan')):.4f} < {v}" for k, v in self.floors.items()
                if not self.metric.get(k, -math.inf) >= v]
        if not self.sim_equals_cpu:
            out.append("cycle model differs from device='cpu'")
        return out

    @property
    def passed(self) -> bool:
        return not self.failures


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    line = text[0] if text else ""
    if isinstance(e, VtaError):
        return line[:300]
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
    return f"{type(e).__name__}{at}: {line}"[:300]


def _ort_outputs(path: Path, feeds: list[Feeds]) -> list[Outputs]:
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return [dict(zip(names, s.run(None, f))) for f in feeds]


def relative_error(ref: list[Outputs], got: list[Outputs]) -> float:
    """Largest |got - ref| over every output and input, each relative to that output's range in `ref`."""
    worst = 0.0
    for r, g in zip(ref, got):
        for k, a in r.items():
            a = np.asarray(a, np.float64)
            b = np.asarray(g[k], np.float64).reshape(a.shape)
            span = float(a.max() - a.min()) if a.size else 0.0
            span = span or float(np.abs(a).max(initial=0.0)) or 1.0
            worst = max(worst, float(np.abs(a - b).max(initial=0.0)) / span)
    return worst


def measure(entry: Entry, sim: bool = True, inspect: Callable[[Any], None] | None = None) -> Row:
    """The row of `entry` (`sim`: also run one input on the cycle model; `inspect(module)`, after that run, lets
    a benchmark read more figures off the int8 module)."""
    import vtakit  # lazy: the compiler loads on the first measurement
    from vtakit.compiler.module.macs import module_macs  # lazy: as vtakit

    row = Row(entry.name, entry.half, entry.kind, entry.source, floors=dict(entry.floors))
    stage = "load"
    try:
        path = entry.model()
        samples = entry.samples()
        bound = set(entry.compile_keywords.get("bind") or {})  # inputs fixed at compile time leave the module
        tests = [{k: v for k, v in f.items() if k not in bound} for f in samples.tests]
        calibration = [{k: v for k, v in f.items() if k not in bound} for f in samples.calibration]
        stage = "compile"
        t0 = time.perf_counter()
        module = vtakit.compile(str(path), CONFIG, calibrate=calibration, **entry.compile_keywords)
        row.compile_s = time.perf_counter() - t0
        stage = "compile float"
        float_module = vtakit.compile(str(path), CONFIG, calibrate=calibration, target="cpu",
                                      **entry.compile_keywords)
        row.accepted = True
        stage = "onnxruntime"
        ref = _ort_outputs(path, samples.tests)
        stage = "run float"
        floats = [float_module.run(f, device="cpu") for f in tests]
        row.float_error = relative_error(ref, floats)
        row.macs = module_macs(float_module).total
        stage = "run int8"
        ints = [module.run(f, device="cpu") for f in tests]
        stage = "metric"
        row.metric = entry.metric(floats, ints)
        if sim:
            stage = "cycle model"
            on_sim = module.run(tests[0], device="sim")
            row.sim_equals_cpu = all(np.array_equal(on_sim[k], ints[0][k]) for k in ints[0])
            rep = module.report()
            row.cycles, row.utilization = rep.accelerator_cycles, rep.utilization
            row.crossings, row.host_ms = rep.border_transfers, rep.host_ms
            row.accelerator_tasks = sum(r.place == "vta" for r in rep.rows)
            row.host_tasks = sum(r.place == "host" for r in rep.rows)
            row.macs_on_accelerator = min(1.0, rep.accelerator_macs / row.macs) if row.macs else None
        if inspect is not None:
            stage = "inspect"
            inspect(module)
        stage = ""
    except Unavailable:
        raise
    except Exception as e:  # noqa: BLE001  (every failure is a finding: its step and one line)
        row.stage, row.reason = stage, _one_line(e)
    return row


def _f(v, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def table(rows: list[Row]) -> TextTable:
    """Issue 39's table: one row per model."""
    t = TextTable(title=f"model corpus on {CONFIG} (defaults, cycle model for one input)")
    cols = ("model", "half", "kind", "accepted", "float err", "int8 task metric", "% MACs on acc", "acc cycles",
            "util %", "crossings", "host ms", "compile s", "passes")
    for c in cols:
        t.add_column(c, justify="right" if c in ("float err", "% MACs on acc", "acc cycles", "util %",
                                                 "crossings", "host ms", "compile s") else "left")
    for r in rows:
        metric = ", ".join(f"{k} {v:.3f}" for k, v in r.metric.items() if k in r.floors)
        t.add_row(r.name, r.half, r.kind, "yes" if r.accepted else "no", _f(r.float_error, ".1e"), metric,
                  _f(None if r.macs_on_accelerator is None else 100 * r.macs_on_accelerator, ".1f"),
                  _f(r.cycles, ","), _f(None if r.utilization is None else 100 * r.utilization, ".1f"),
                  _f(r.crossings, "d"), _f(r.host_ms, ".1f"), _f(r.compile_s, ".1f"),
                  "yes" if r.passed else "no")
    return t


def reasons(rows: list[Row]) -> list[str]:
    """Why each model that does not pass fails, one line each (under the table: too long for a cell)."""
    return [f"{r.name} ({r.half}): {'; '.join(r.failures)}" for r in rows if not r.passed]


def as_dict(row: Row) -> dict:
    return {**asdict(row), "passed": row.passed, "failures": row.failures}
