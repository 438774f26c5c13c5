"""vtakit.sim: functional and cycle-level simulators of the accelerator.

    stats = vtakit.sim.run(cfg, dram, insn_addr, insn_count, model="cycle", trace="t.json")

runs `insn_count` instructions found at byte `insn_addr` of `dram` (a 1-D uint8
numpy array, modified in place) on fresh on-chip state.  `SimDevice` is the
same behind the Device protocol, with state that persists across runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vtakit.devices import ACCELERATOR, device_names, open_device
from vtakit.isa.config import HwConfig
from vtakit.isa.image import ProgramImage
from vtakit.sim.decoded import check_dram
from vtakit.sim.device import MODELS, Device, SimDevice, execute, model_name
from vtakit.sim.machine import Machine
from vtakit.sim.stats import ModuleStats, RunStats


def run(cfg: HwConfig, dram: np.ndarray, insn_addr: int, insn_count: int, *,
        model: str = "functional", trace: "str | Path | None" = None,
        timeout_s: float | None = None) -> RunStats:
    """Run a program from a DRAM image on fresh state; `dram` is updated in place.

    `model` is "functional" (or "fsim"), "cycle" (or "sim"), or another registered
    device that runs on a given DRAM, e.g. "rtl": the Verilator-built RTL (vtakit.hw),
    which `trace` then writes as a waveform (VCD if the path ends in .vcd, else FST)."""
    check_dram(dram)
    if model not in MODELS and model in device_names(ACCELERATOR):
        device = open_device(model, cfg, dram=dram, trace=trace)
        try:
            return device.run(insn_addr, insn_count, timeout_s=timeout_s)
        finally:
            device.close()
    return execute(Machine(cfg, dram), insn_addr, insn_count, model=model, trace=trace,
                   timeout_s=timeout_s)


def run_image(image: ProgramImage, *, model: str = "functional", trace: "str | Path | None" = None,
              timeout_s: float | None = None) -> tuple[RunStats, np.ndarray]:
    """Run a program image on a copy of its DRAM; returns the stats and the final DRAM."""
    dram = image.dram.copy()
    stats = run(image.config, dram, image.insn_addr, image.insn_count, model=model, trace=trace,
                timeout_s=timeout_s)
    return stats, dram


__all__ = ["run", "run_image", "execute", "model_name", "Device", "SimDevice", "Machine",
           "RunStats", "ModuleStats"]
