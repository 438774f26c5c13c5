"""Tuned schedules reach the compiler here: workload keys and the active schedule table.

A tuner measures schedules for a *workload* (an operator's shapes and the
structure of its fused epilogue) on one accelerator configuration.  The
compiler asks `lookup(key, cfg)` before falling back to its default heuristic;
`vtakit.scheduling.apply_best(log)` installs a table built from a tuning log:

    with apply_best("tune.jsonl"):
        module = vtakit.compile("resnet18.onnx", config="pynq")   # tuned convolutions

The key leaves out what cannot change a schedule's speed (the shift amount,
the clip bounds), so a layer tuned with VTA's benchmark epilogue serves the
same layer inside a quantized network.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, Protocol

from vtakit.isa.config import HwConfig


def conv2d_key(*, x_shape, w_shape, stride: int, padding: int, epilogue: tuple[str, ...]) -> str:
    """'conv2d:1x64x56x56:64x64x3x3:s1p1:add-shr-min-max' (epilogue: the ALU steps after the GEMM)."""
    n, c, h, w = x_shape
    o, i, kh, kw = w_shape
    tail = "-".join(step.lower() for step in epilogue) or "none"
    return f"conv2d:{n}x{c}x{h}x{w}:{o}x{i}x{kh}x{kw}:s{stride}p{padding}:{tail}"


class ScheduleTable(Protocol):
    def lookup(self, key: str, cfg: HwConfig) -> dict | None:
        """The best knobs (as a dict) recorded for this workload on this configuration, or None."""


_local = threading.local()


def _stack() -> list[ScheduleTable]:
    if not hasattr(_local, "tables"):
        _local.tables = []
    return _local.tables


@contextmanager
def use_schedules(table: ScheduleTable) -> Iterator[ScheduleTable]:
    """Make `table` the first place the compiler looks for schedules, inside this block."""
    _stack().append(table)
    try:
        yield table
    finally:
        _stack().pop()


def active_tables() -> tuple[ScheduleTable, ...]:
    """The schedule tables in force in this thread, outermost first (the compile cache skips a compile
    that has any: it cannot see which schedules a table would give)."""
    return tuple(_stack())


def lookup(key: str, cfg: HwConfig) -> dict | None:
    """Knobs for `key` on `cfg` from the innermost active table that has them."""
    for table in reversed(_stack()):
        found = table.lookup(key, cfg)
        if found is not None:
            return found
    return None
