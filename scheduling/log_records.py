"""What a tuning-log record must hold before anything reads a number from it.

A log is a file anyone can edit, truncate or forge, and its numbers reach
reports (utilization = peak cycles / cycles) and its knobs reach the compiler
(a zero tile divides by zero).  So every record is checked twice:

* `record_problem`: the schema, on reading any log: required fields and their
  types, cycle counts positive integers, exactly one of cycles and error.
* `usable_problem`: against the configuration that wants to use it: a record
  claiming fewer cycles than the task's MACs at 100 % GEMM utilization is
  impossible, and the knobs must be a convolution schedule whose tiles lie
  inside the task's extents.

Both return the reason as text (None when fine), so callers can decide between
an error and a skip with a warning.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.isa.arith import ceil_div
from vtakit.isa.config import HwConfig

REQUIRED_KEYS = ("workload", "config", "schedule", "cycles", "error")
"""Every record has these; `config` is the HwConfig's fingerprint.  Records written before the
fingerprint was stored (none of vtakit's, but hand-made ones) cannot be tied to a configuration
and a schedule tuned for another one may not fit: they are invalid, never guessed."""

MAX_CYCLES = 1 << 62
"""Far above any simulated layer, and small enough for every int64 the reports compute with."""

MAX_KNOB = 1 << 16
"""Tiles and thread counts above this are not schedules of any layer the compiler takes."""

KNOB_NAMES = tuple(f.name for f in fields(ConvKnobs))
TILE_KNOBS = ("tile_oc", "tile_oh", "tile_ow", "tile_ic")
KNOB_CHOICES = {"order": ("oc", "sp"), "vthread_axis": ("oh", "oc"), "hoist_weights": (False, True)}

_OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {
    "trial": (int,), "timestamp": (str,), "task": (str,), "config_label": (str,), "tuner": (str,),
    "device": (str,), "compile_s": (int, float), "run_s": (int, float),
}


def _show(value: object, limit: int = 60) -> str:
    """A value for an error message, cut short: a forged record must not become a huge message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def record_problem(rec: object) -> str | None:
    """Why `rec` is not a well-formed tuning record, or None."""
    if not isinstance(rec, dict):
        return f"not a tuning record (a JSON object with {', '.join(REQUIRED_KEYS)})"
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        return f"not a tuning record (needs {', '.join(REQUIRED_KEYS)}; {missing[0]!r} is missing)"
    for key in ("workload", "config"):
        if not isinstance(rec[key], str) or not rec[key]:
            return f"{key} must be a non-empty string, got {_show(rec[key])}"
    schedule = rec["schedule"]
    if not isinstance(schedule, dict):
        return f"schedule must be an object of knobs, got {_show(schedule)}"
    for name, value in schedule.items():
        if not isinstance(value, (int, str)):          # bool is an int
            return f"schedule knob {_show(name)} must be a number, string or boolean, got {_show(value)}"
    cycles, error = rec["cycles"], rec["error"]
    if cycles is not None and (not _is_int(cycles) or not 1 <= cycles <= MAX_CYCLES):
        return f"cycles must be a positive integer, got {_show(cycles)}"
    if error is not None and not isinstance(error, str):
        return f"error must be a string or null, got {_show(error)}"
    if (cycles is None) == (error is None):
        return "a record holds either cycles or an error, not " + ("both" if cycles is not None else "neither")
    for key, types in _OPTIONAL_TYPES.items():
        value = rec.get(key)
        if value is None:
            continue
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{key} has the wrong type: {_show(value)}"
        if isinstance(value, (int, float)) and (not math.isfinite(value) or value < 0):
            return f"{key} must be a finite non-negative number, got {_show(value)}"
    return None


def knobs_problem(schedule: dict) -> str | None:
    """Why a record's knobs are not a convolution schedule (ConvKnobs), or None."""
    names = set(schedule)
    if names != set(KNOB_NAMES):
        odd = sorted(names - set(KNOB_NAMES)) or sorted(set(KNOB_NAMES) - names)
        return f"schedule knobs must be exactly {', '.join(KNOB_NAMES)} (not so: {_show(odd[0])})"
    for name in (*TILE_KNOBS, "vthreads"):
        value = schedule[name]
        if not _is_int(value) or not 1 <= value <= MAX_KNOB:
            return f"schedule knob {name} must be a positive integer, got {_show(value)}"
    for name, choices in KNOB_CHOICES.items():
        value = schedule[name]
        if not any(type(value) is type(c) and value == c for c in choices):
            return f"schedule knob {name} must be one of {', '.join(map(repr, choices))}, got {_show(value)}"
    return None


@dataclass(frozen=True)
class ConvWorkload:
    """The shapes a conv2d workload key names (dispatch.conv2d_key)."""

    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kh: int
    kw: int
    stride: int
    pad: int

    @property
    def out_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad - self.kh) // self.stride + 1,
                (self.w + 2 * self.pad - self.kw) // self.stride + 1)

    @property
    def macs(self) -> int:
        oh, ow = self.out_hw
        return self.n * self.c_out * oh * ow * self.c_in * self.kh * self.kw

    def extents(self, cfg: HwConfig) -> dict[str, int]:
        """The largest value each tile knob can take on `cfg` (channels in blocks)."""
        oh, ow = self.out_hw
        return {"tile_oc": ceil_div(self.c_out, cfg.block_out), "tile_ic": ceil_div(self.c_in, cfg.block_in),
                "tile_oh": oh, "tile_ow": ow}


_KEY = re.compile(r"conv2d:([0-9]+)x([0-9]+)x([0-9]+)x([0-9]+):([0-9]+)x([0-9]+)x([0-9]+)x([0-9]+)"
                  r":s([0-9]+)p([0-9]+):[a-z0-9-]+")


def parse_workload(key: str) -> ConvWorkload | None:
    """The shapes of a conv2d workload key, or None when the key is not one (or names no output)."""
    m = _KEY.fullmatch(key)
    if m is None or max(len(g) for g in m.groups()) > 9:
        return None
    n, c, h, w, o, i, kh, kw, stride, pad = map(int, m.groups())
    if min(n, c, h, w, o, kh, kw, stride) < 1 or i != c:
        return None
    wl = ConvWorkload(n, c, h, w, o, kh, kw, stride, pad)
    return wl if min(wl.out_hw) >= 1 else None


def usable_problem(rec: dict, cfg: HwConfig) -> str | None:
    """Why a well-formed record cannot be right for its workload on `cfg`, or None.

    The knobs must be a convolution schedule whatever the key; the peak and the extents are
    checked where the key names a conv2d workload (the only kind the compiler looks up)."""
    problem = knobs_problem(rec["schedule"])
    if problem is not None:
        return problem
    wl = parse_workload(rec["workload"])
    if wl is None:
        return None
    if rec["cycles"] is not None:
        peak = wl.macs / cfg.peak_macs_per_cycle       # 100 % GEMM utilization: no schedule is faster
        if rec["cycles"] < peak * (1 - 1e-9):
            return (f"{rec['cycles']:,} cycles is faster than the peak of config {cfg.label} allows "
                    f"({math.ceil(peak):,} cycles for {wl.macs:,} MACs)")
    for name, extent in wl.extents(cfg).items():
        if rec["schedule"][name] > extent:
            return f"schedule knob {name}={rec['schedule'][name]} exceeds the workload's extent {extent}"
    return None
