"""Tuning logs: JSON lines, one record per measurement, appended and flushed as results arrive.

A record names the workload (the compiler's key), the configuration (its
fingerprint, plus its label for people), the schedule, and either cycles or the
error; the tuner, the trial number and a timestamp ride along.  Each append is
flushed and fsynced, so a killed run keeps every result it reported; a rerun
with the same log reads them back, measures none of them again and goes on.
A line cut short by a kill is skipped on reading and cut off before the next
append.

`apply_best(log)` turns a log into the table the compiler consults:

    with apply_best("tune.jsonl"):
        y, report = vtakit.ops.conv2d(x, w, ...)     # the best measured schedule for this layer
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from vtakit.compiler.vta.dispatch import use_schedules
from vtakit.errors import VtaError
from vtakit.isa.config import HwConfig

RECORD_KEYS = ("workload", "config", "schedule", "cycles", "error")


def _check_record(rec: object, where: str) -> dict:
    if not isinstance(rec, dict) or any(k not in rec for k in RECORD_KEYS):
        raise VtaError(f"{where}: not a tuning record (needs {', '.join(RECORD_KEYS)})")
    if not isinstance(rec["schedule"], dict):
        raise VtaError(f"{where}: schedule must be an object of knobs")
    return rec


def read_log(path: str | Path) -> list[dict]:
    """Every complete record of a log, in file order; a cut-off last line is skipped."""
    path = Path(path)
    if not path.exists():
        raise VtaError(f"tuning log {path} does not exist")
    records = []
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):          # the last line, cut by a kill: it was never acknowledged
                continue
            raise VtaError(f"{path}:{i}: not valid JSON") from None
        records.append(_check_record(rec, f"{path}:{i}"))
    return records


class TuningLog:
    """An append-only log file (created if missing)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records = read_log(self.path) if self.path.exists() else []
        if self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):   # a record torn by a kill was never complete: drop it
                with open(self.path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)

    def for_task(self, workload: str, cfg: HwConfig) -> list[dict]:
        fp = cfg.fingerprint()
        return [r for r in self.records if r["workload"] == workload and r["config"] == fp]

    def append(self, record: dict) -> None:
        record = {**record, "timestamp": record.get("timestamp") or time.strftime("%Y-%m-%dT%H:%M:%S")}
        _check_record(record, "record")
        line = json.dumps(record, sort_keys=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records.append(record)


@dataclass
class BestSchedules:
    """The fastest measured schedule per (workload, configuration fingerprint)."""

    best: dict[tuple[str, str], dict] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    """Workload keys the compiler looked up and found (what a compile actually took from the log)."""

    @classmethod
    def from_records(cls, records: list[dict]) -> "BestSchedules":
        table: dict[tuple[str, str], dict] = {}
        for r in records:
            if r.get("cycles") is None:
                continue
            key = (r["workload"], r["config"])
            if key not in table or r["cycles"] < table[key]["cycles"]:
                table[key] = r
        return cls(table)

    def lookup(self, key: str, cfg: HwConfig) -> dict | None:
        rec = self.best.get((key, cfg.fingerprint()))
        if rec is None:
            return None
        self.used.add(key)
        return dict(rec["schedule"])

    def __len__(self) -> int:
        return len(self.best)


@contextmanager
def apply_best(log: str | Path | list[str | Path]) -> Iterator[BestSchedules]:
    """Inside this block the compiler (vtakit.ops.*, vtakit.compile) uses the best schedule the
    log(s) recorded for each workload on its configuration; others keep the default heuristic."""
    paths = log if isinstance(log, list) else [log]
    records = [r for p in paths for r in read_log(p)]
    table = BestSchedules.from_records(records)
    with use_schedules(table):
        yield table
