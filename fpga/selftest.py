"""`vtakit fpga check`: does the accelerator behind an overlay compute what the functional model does?

Three steps, each a row of the report: the registers answer (the accelerator is idle, in which
flavour, at which PL clock); random programs (sim.random_programs: padded loads, GEMM loops
with resets, every ALU operation, overlapping stores) leave the DRAM byte for byte as a functional
model that ran the same sequence (on-chip state carries over between programs, on both); a small
convolution compiled by vtakit.ops gives the functional model's output.  The same code checks a
real board and the simulated one (`--sim`), which is how it is tested here.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from vtakit import ops
from vtakit.compiler.backends.vta import reference
from vtakit.errors import DeviceError, VtaError
from vtakit.fpga.driver import PynqDevice
from vtakit.isa.image import ProgramImage
from vtakit.sim.device import SimDevice
from vtakit.sim.random_programs import random_program
from vtakit.sim.stats import RunStats

CTRL_IDLE = 1 << 2


@dataclass
class CheckRow:
    name: str
    ok: bool
    detail: str
    seconds: float
    cycles: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def run_image(device: PynqDevice, image: ProgramImage, timeout_s: float | None = None) -> RunStats:
    """Place a program image at address 0 of the device's DRAM (its addresses assume that) and run it."""
    device.reset_alloc()
    n = image.dram.size
    if device.alloc(n) != 0:
        raise DeviceError("the DRAM image does not start at address 0")
    device.dram[:n] = image.dram
    return device.run(image.insn_addr, image.insn_count, timeout_s=timeout_s)


def _timed(name: str, fn) -> CheckRow:
    t0 = time.perf_counter()
    try:
        ok, detail, cycles = fn()
    except VtaError as e:
        ok, detail, cycles = False, f"{type(e).__name__}: {e}", None
    return CheckRow(name, ok, detail, round(time.perf_counter() - t0, 3), cycles)


def check_registers(device: PynqDevice) -> tuple[bool, str, None]:
    control = device.read_reg("fetch", "CONTROL")
    clock = f"{device.pl_clock_mhz:g} MHz" if device.pl_clock_mhz else "unknown"
    detail = (f"{device.register_map.describe()}; fetch control {control:#x}; PL clock {clock} "
              f"(config {device.config.clock_mhz:g} MHz); DRAM image at {device.physical_base:#x}")
    return bool(control & CTRL_IDLE), detail, None


def check_programs(device: PynqDevice, count: int, seed: int) -> tuple[bool, str, int]:
    cfg = device.config
    reference = SimDevice(cfg, model="functional", dram_bytes=device.dram.size)
    cycles, bad = 0, []
    for k in range(count):
        image = random_program(cfg, seed + k)
        n = image.dram.size
        reference.dram[:n] = image.dram
        reference.run(image.insn_addr, image.insn_count)
        stats = run_image(device, image)
        cycles += stats.cycles or 0
        diff = np.flatnonzero(np.asarray(device.dram[:n]) != reference.dram[:n])
        if diff.size:
            bad.append(f"seed {seed + k}: first differing byte {diff[0]:#x}")
    detail = f"{count} random programs byte for byte" + (f"; {'; '.join(bad)}" if bad else "")
    return not bad, detail, cycles


def check_conv(device: PynqDevice, seed: int) -> tuple[bool, str, int]:
    cfg = device.config
    rng = np.random.default_rng(seed)
    c = 2 * cfg.block_in
    x = rng.integers(-128, 128, (cfg.batch, c, 14, 14), dtype=np.int8)
    w = rng.integers(-128, 128, (2 * cfg.block_out, c, 3, 3), dtype=np.int8)
    b = rng.integers(-4096, 4096, w.shape[0], dtype=np.int32)
    args = dict(padding=1, bias=b, shift=8, clip=(0, 127), config=cfg)
    device.reset_alloc()
    y, rep = ops.conv2d(x, w, device=device, **args)
    expect, _ = ops.conv2d(x, w, device="fsim", **args)
    same = np.array_equal(y, expect) and np.array_equal(y, reference.conv2d(x, w, 1, 1, b, shift=8, clip=(0, 127)))
    verdict = "same as" if same else "differs from"
    return same, f"conv2d {x.shape} * {w.shape}, 3x3 pad 1: {verdict} the functional model", rep.cycles


def board_check(device: PynqDevice, *, programs: int = 8, seed: int = 0) -> list[CheckRow]:
    """The rows of the report, in order; every row must be ok for the board to pass."""
    rows = [_timed("registers", lambda: check_registers(device))]
    if not rows[0].ok:
        return rows
    rows.append(_timed("random programs", lambda: check_programs(device, programs, seed)))
    rows.append(_timed("conv layer", lambda: check_conv(device, seed)))
    return rows
