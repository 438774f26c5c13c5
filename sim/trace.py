"""Chrome / Perfetto trace output: one lane per module, so overlap is visible.

Open the JSON in https://ui.perfetto.dev or chrome://tracing.  Times are in
microseconds of accelerator time (cycles / clock), so the ruler reads real time;
each span also carries its cycle numbers in `args`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LANES = ("fetch", "load", "compute", "store", "memory port")


class TraceRecorder:
    """Collects complete ("X") events and writes them as a Chrome trace file."""

    def __init__(self, clock_mhz: float, *, time_unit: str = "cycles", title: str = "vtakit"):
        self._scale = 1.0 / clock_mhz if time_unit == "cycles" else 1.0
        self._unit = time_unit
        self._title = title
        self.events: list[dict[str, Any]] = []

    def span(self, lane: str, name: str, start: int, end: int, **args: Any) -> None:
        if end <= start:
            end = start + 1 if self._unit != "cycles" else start
        self.events.append({
            "ph": "X", "pid": 0, "tid": LANES.index(lane), "name": name,
            "ts": start * self._scale, "dur": (end - start) * self._scale,
            "args": {"start": start, "end": end, **args},
        })

    def write(self, path: "str | Path") -> str:
        meta: list[dict[str, Any]] = [
            {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": self._title}}]
        for tid, lane in enumerate(LANES):
            meta.append({"ph": "M", "pid": 0, "tid": tid, "name": "thread_name", "args": {"name": lane}})
            meta.append({"ph": "M", "pid": 0, "tid": tid, "name": "thread_sort_index",
                         "args": {"sort_index": tid}})
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            json.dump({"traceEvents": meta + self.events, "displayTimeUnit": "ns",
                       "otherData": {"time_unit": self._unit}}, f)
        return str(path)
