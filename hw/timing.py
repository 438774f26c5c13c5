"""Timing estimate of a configuration's RTL: logic delay from Yosys's cell delays, a routed estimate.

The analysis (hw.sta) runs on the xc7 netlist `hw.synth` keeps in its cache, with the Artix-7 /
Zynq-7000 speed grade -1 delays Yosys's Xilinx library carries (Project X-Ray's figures).  Two
figures come out:

- **logic delay**: clock-to-out of the launching register or block RAM, every cell on the way, and
  the capturing register's setup; no wire at all, so a lower bound on the period;
- **routed estimate**: the same analysis with `NET_DELAY_NS` added for every net the path crosses
  (its critical path can be another one).  0.5 ns is a typical placed-and-routed net on a -1
  7-series part in Vivado's reports (local nets 0.2-0.4 ns, nets leaving a slice cluster or with
  fan-out in the tens 0.6-1.5 ns); it makes routing about half of a LUT-dominated path, as Vivado
  reports usually show.  It is an estimate, not a place-and-route (hw.pnr runs one, on a Lattice
  part, as a second opinion).

UltraScale+ parts have no delays in Yosys's library: their figures are the 7-series ones times
`XCUP_SCALE` (0.6, about the ratio of the -1 grades' block-RAM and DSP maximum frequencies in the
two families' data sheets), a rough figure.  Results are cached by the netlist and this module's
version, so a later call costs a file read.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import asdict, dataclass

from vtakit.errors import RtlError
from vtakit.hw.build import cache_root, locked
from vtakit.hw.sta import Netlist, critical_path, xilinx_library
from vtakit.hw.synth import PARTS, part_for, synthesized
from vtakit.isa.config import HwConfig

TIMING_VERSION = "2"   # 2: end points named by the register or RAM they capture in
NET_DELAY_NS = 0.5
XCUP_SCALE = 0.6
TIMING_PART = "xc7z020"   # the netlist analysed: the xc7 mapping (the family with cell delays)


@dataclass(frozen=True)
class TimingResult:
    config: str
    part: str
    clock_mhz: float
    logic_ns: float           # critical path, cells only
    levels: int               # cells between the launching and the capturing element
    start: str                # where the logic critical path starts (net, element)
    end: str
    routed_ns: float          # with NET_DELAY_NS per net: the estimate fmax and slack come from
    routed_start: str
    routed_end: str
    fmax_mhz: float           # 1000 / routed_ns
    slack_ns: float           # clock period - routed_ns
    scale: float              # 1.0 on 7-series, XCUP_SCALE on UltraScale+
    seconds: float            # analysis time of the run that filled the cache
    path: tuple[tuple[str, str, float], ...]   # the routed critical path: (element, net, arrival ns)

    @property
    def meets(self) -> bool:
        return self.slack_ns >= 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["meets"] = self.meets
        return d


def timing(cfg: HwConfig, part: str | None = None, *, timeout_s: float = 3600.0) -> TimingResult:
    """The timing estimate of `cfg` on `part` (default: its board's) at `cfg.clock_mhz`; synthesizes
    the xc7 netlist first if the cache lacks it."""
    p = part_for(cfg, part)
    record = analysis(cfg, timeout_s=timeout_s)
    scale = XCUP_SCALE if p.family == "xcup" else 1.0
    logic, routed = record["logic"]["ns"] * scale, record["routed"]["ns"] * scale
    return TimingResult(
        config=cfg.label, part=p.name, clock_mhz=cfg.clock_mhz, logic_ns=round(logic, 3),
        levels=record["logic"]["levels"], start=record["logic"]["start"], end=record["logic"]["end"],
        routed_ns=round(routed, 3), routed_start=record["routed"]["start"], routed_end=record["routed"]["end"],
        fmax_mhz=round(1000.0 / routed, 1), slack_ns=round(1000.0 / cfg.clock_mhz - routed, 3), scale=scale,
        seconds=record["seconds"],
        path=tuple((e, n, round(t * scale, 3)) for e, n, t in record["routed"]["path"]))


def analysis(cfg: HwConfig, *, timeout_s: float = 3600.0) -> dict:
    """The cached analysis of `cfg`'s xc7 netlist (unscaled, in ns)."""
    src = synthesized(cfg, PARTS[TIMING_PART], timeout_s)
    out = cache_root() / "timing" / f"{src.name}-t{TIMING_VERSION}-n{int(NET_DELAY_NS * 1000)}"
    result = out / "timing.json"
    with locked(out):
        if not result.exists():
            result.write_text(json.dumps(_analyse(src / "netlist.json.gz")))
    return json.loads(result.read_text())


def _analyse(netlist_file) -> dict:
    if not netlist_file.exists():
        raise RtlError(f"no netlist at {netlist_file} (a synthesis cache from before netlists were kept?)")
    t0 = time.perf_counter()
    with gzip.open(netlist_file, "rt") as f:
        net = Netlist(json.load(f), "vta_top")
    lib = xilinx_library()
    logic, unknown = critical_path(net, lib)
    routed, _ = critical_path(net, lib, net_ps=int(NET_DELAY_NS * 1000))

    def summary(p) -> dict:
        return {"ns": p.delay_ps / 1000, "levels": p.levels, "start": p.start, "end": p.end,
                "path": [(e, n, t / 1000) for e, n, t in p.steps]}
    return {"logic": summary(logic), "routed": summary(routed), "untimed_cells": sorted(unknown),
            "seconds": round(time.perf_counter() - t0, 1)}
