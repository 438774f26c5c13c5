"""Tuning logs: JSON lines, one record per measurement, appended and flushed as results arrive.

A record names the workload (the compiler's key), the configuration (its
fingerprint, plus its label for people), the schedule, and either cycles or the
error; the tuner, the trial number and a timestamp ride along.  Each append is
flushed and fsynced, so a killed run keeps every result it reported; a rerun
with the same log reads them back, measures none of them again and goes on.
A complete last record without its newline is kept (the newline is added
before the next append); a line cut short by a kill, never acknowledged, is
skipped on reading and cut off before the next append.

A log is not trusted (log_records.py): every record is checked on reading.
`read_log` refuses a log with an invalid record (one error naming the line);
the tuner and the compiler skip invalid records with one warning that says how
many and where the first is, so one damaged line stops neither a resume nor a
compile.  Records for another configuration are never used.

`apply_best(log)` turns a log into the table the compiler consults:

    with apply_best("tune.jsonl"):
        y, report = vtakit.ops.conv2d(x, w, ...)     # the best measured schedule for this layer
"""

from __future__ import annotations

import json
import os
import time
import warnings
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from vtakit.compiler.backends.vta.dispatch import use_schedules
from vtakit.errors import VtaError
from vtakit.files import read_limited
from vtakit.isa.config import HwConfig
from vtakit.scheduling.log_records import record_problem, usable_problem

MAX_LOG_BYTES = 1 << 30
"""A tuning log may hold at most this (1 GiB, some 3 M records): a log is read whole."""


class TuningLogWarning(UserWarning):
    """Records of a tuning log that were skipped (the message says how many and where)."""


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _parse_line(raw: bytes) -> tuple[object, str | None]:
    """(the JSON value of one line, None) or (None, why it is not JSON)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})"
    try:
        return json.loads(text, parse_constant=_reject_constant), None
    except RecursionError:
        return None, "not valid JSON (nested too deeply)"
    except ValueError:
        return None, "not valid JSON"


def _warn_skipped(what: str, skipped: list[tuple[str, str]]) -> None:
    """One warning for all the records skipped (`skipped`: where, why), naming the first."""
    if skipped:
        where, why = skipped[0]
        warnings.warn(f"{what}: skipped {len(skipped)} invalid record{'s' if len(skipped) > 1 else ''} "
                      f"(first at {where}: {why})", TuningLogWarning, stacklevel=3)


def _scan(path: Path, strict: bool) -> tuple[list[dict], list[int]]:
    """The valid records of a log and their line numbers; the invalid ones raise (strict) or warn."""
    data = read_limited(path, "tuning log", MAX_LOG_BYTES)
    lines = data.split(b"\n")
    records, numbers, skipped = [], [], []
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        rec, why = _parse_line(raw)
        if why is not None and i == len(lines):
            continue            # the last line, cut by a kill: it was never acknowledged
        if why is None:
            why = record_problem(rec)
        if why is None:
            records.append(rec)
            numbers.append(i)
        elif strict:
            raise VtaError(f"{path}:{i}: {why}")
        else:
            skipped.append((f"line {i}", why))
    _warn_skipped(str(path), skipped)
    return records, numbers


def read_log(path: str | Path, *, strict: bool = True) -> list[dict]:
    """Every complete record of a log, in file order; a cut-off last line is skipped.

    An invalid record is an error naming its line; with strict=False it is skipped, with one warning."""
    return _scan(Path(path), strict)[0]


class TuningLog:
    """An append-only log file (created if missing); invalid records are skipped with a warning."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records, self.lines = _scan(self.path, strict=False) if self.path.exists() else ([], [])
        self._line_count = self._repair_tail() if self.path.exists() else 0

    def _repair_tail(self) -> int:
        """End the file with a newline (a complete last record gets its newline, a torn one goes);
        returns the number of lines."""
        data = read_limited(self.path, "tuning log", MAX_LOG_BYTES)
        if not data or data.endswith(b"\n"):
            return data.count(b"\n")
        start = data.rfind(b"\n") + 1
        _, why = _parse_line(data[start:])
        with open(self.path, "r+b") as f:
            if why is None:
                f.seek(0, os.SEEK_END)
                f.write(b"\n")
            else:
                f.truncate(start)
            f.flush()
            os.fsync(f.fileno())
        return data.count(b"\n") + (why is None)

    def for_task(self, workload: str, cfg: HwConfig) -> list[dict]:
        """This workload's records for `cfg`; measurements impossible on `cfg` are skipped with a warning."""
        fp = cfg.fingerprint()
        found, skipped = [], []
        for rec, line in zip(self.records, self.lines):
            if rec["workload"] != workload or rec["config"] != fp:
                continue
            why = usable_problem(rec, cfg) if rec["cycles"] is not None else None
            if why is None:
                found.append(rec)
            else:
                skipped.append((f"line {line}", why))
        _warn_skipped(f"{self.path} ({workload} on {cfg.label})", skipped)
        return found

    def append(self, record: dict, cfg: HwConfig | None = None) -> None:
        """Add one record, durably (flushed and fsynced) before returning; `cfg` fills in its fingerprint."""
        record = {**record, "timestamp": record.get("timestamp") or time.strftime("%Y-%m-%dT%H:%M:%S")}
        if cfg is not None and "config" not in record:
            record.update(config=cfg.fingerprint(), config_label=cfg.label)
        why = record_problem(record)
        if why is not None:
            raise VtaError(f"refusing to log a record: {why}")
        try:
            line = json.dumps(record, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise VtaError(f"refusing to log a record that is not plain JSON: {e}") from None
        with open(self.path, "ab") as f:
            f.write(line.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self._line_count += 1
        self.records.append(record)
        self.lines.append(self._line_count)


@dataclass
class BestSchedules:
    """The fastest usable measured schedule per (workload, configuration fingerprint)."""

    candidates: dict[tuple[str, str], list[tuple[dict, str]]] = field(default_factory=dict)
    """Measured records (with where they are: "log:line") per key, fastest first."""
    used: set[str] = field(default_factory=set)
    """Workload keys the compiler looked up and found (what a compile actually took from the log)."""
    _chosen: dict[tuple[str, str], dict | None] = field(default_factory=dict)

    @classmethod
    def from_records(cls, records: list[dict], where: list[str] | None = None) -> "BestSchedules":
        """`where[i]` says where records[i] comes from, for warnings ("tune.jsonl:12")."""
        table: dict[tuple[str, str], list[tuple[dict, str]]] = {}
        for r, at in zip(records, where or [f"record {i}" for i in range(len(records))]):
            if r.get("cycles") is not None:
                table.setdefault((r["workload"], r["config"]), []).append((r, at))
        for recs in table.values():
            recs.sort(key=lambda pair: pair[0]["cycles"])     # stable: the earlier of equal records first
        return cls(table)

    @property
    def best(self) -> dict[tuple[str, str], dict]:
        """The fastest record per key as logged (before the checks against a configuration)."""
        return {key: recs[0][0] for key, recs in self.candidates.items()}

    def _choose(self, key: str, cfg: HwConfig) -> dict | None:
        skipped, chosen = [], None
        for rec, at in self.candidates.get((key, cfg.fingerprint()), []):
            why = usable_problem(rec, cfg)
            if why is None:
                chosen = rec
                break
            skipped.append((at, why))
        _warn_skipped(f"tuning log records for {key} on {cfg.label}", skipped)
        return chosen

    def lookup(self, key: str, cfg: HwConfig) -> dict | None:
        slot = (key, cfg.fingerprint())
        if slot not in self._chosen:
            self._chosen[slot] = self._choose(key, cfg)
        rec = self._chosen[slot]
        if rec is None:
            return None
        self.used.add(key)
        return dict(rec["schedule"])

    def __len__(self) -> int:
        return len(self.candidates)


@contextmanager
def apply_best(log: str | Path | list[str | Path]) -> Iterator[BestSchedules]:
    """Inside this block the compiler (vtakit.ops.*, vtakit.compile) uses the best schedule the
    log(s) recorded for each workload on its configuration; others keep the default heuristic.
    Invalid records are skipped with one warning per log; so are records that cannot be right
    for the configuration asking (fewer cycles than its peak allows, knobs that are no schedule)."""
    paths = log if isinstance(log, list) else [log]
    records, where = [], []
    for p in paths:
        recs, lines = _scan(Path(p), strict=False)
        records += recs
        where += [f"{p}:{line}" for line in lines]
    table = BestSchedules.from_records(records, where)
    with use_schedules(table):
        yield table


def tuning_context(log: str | Path | list[str | Path] | None) -> AbstractContextManager[BestSchedules | None]:
    """apply_best(log), or nothing when no log is given: what vtakit.compile and the CLI's --tuning-log
    options enter around a compile.  Yields the schedule table (None without a log)."""
    if log is not None and not isinstance(log, (str, os.PathLike, list)):
        raise VtaError(f"tuning_log is a log file or a list of them, not {type(log).__name__}")
    return apply_best(log) if log else nullcontext()
