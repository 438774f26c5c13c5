"""PynqDevice: the accelerator on a PYNQ board behind the Device protocol, driven with pynq's API.

The run sequence is VTA's (its pynq_driver.cc), written with pynq's objects:

- `pynq.Overlay` loads the bitstream and parses its .hwh; the register blocks are found in its
  ip_dict, whether one vtakit IP or VTA's four HLS IPs (fpga.regmap);
- one `pynq.allocate`d buffer (physically contiguous, cacheable) is the DRAM image and `alloc`
  carves it.  Instructions carry image-relative element addresses and the driver writes the
  image's physical address into the five base-address registers; VTA's runtime writes 0 there
  and puts physical element addresses in its instructions instead: the bus sees the same sum;
- a run flushes the image, writes the instruction count and address and the bases, starts
  fetch (0x1) and the data modules (0x81, auto-restart), polls fetch's done bit, then compute's
  done register, switches auto-restart off and invalidates the image;
- a run that does not finish in time raises DeviceTimeout with the registers in its message;
  the PL is then programmed again (the overlay downloaded) before the next run, since a stuck
  accelerator has no other reset.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from vtakit.devices import register_device
from vtakit.errors import DeadlockError, DeviceError, DeviceTimeout, SimError
from vtakit.hw.boards import BoardPreset, board as board_preset
from vtakit.fpga.overlay import check_hwh_config, check_overlay, find_overlay, overlay_files
from vtakit.fpga.regmap import (AUTORESTART, AUTORESTART_OFF, BASE_REGISTERS, BLOCK_SPAN, CTRL_DONE, MODULES,
                                REGISTERS, START, VTA_HLS, VTAKIT, RegisterMap, discover, pl_clock_mhz, register)
from vtakit.hw.device import ERROR_CODES
from vtakit.isa.config import HwConfig
from vtakit.sim.decoded import DecodedProgram, decode_for_sim, static_counters
from vtakit.sim.device import execute
from vtakit.sim.functional import replay_tokens
from vtakit.sim.machine import Machine
from vtakit.sim.stats import Counters, RunStats
from vtakit.isa.arith import round_up

INSN_BYTES = 16
DATA_MODULES = ("load", "compute", "store")


def import_pynq():
    try:
        import pynq  # lazy: pynq (the board extra)
    except ImportError:
        raise DeviceError("the 'pynq' package is not installed (pip install 'vtakit[board]')") from None
    return pynq


def active_board(pynq):
    """pynq's active pynq.Device; DeviceError where there is none (no board, or XRT not set up)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # pynq warns "No devices found" before raising
        try:
            return pynq.Device.active_device
        except RuntimeError:
            raise DeviceError("no PYNQ board here: pynq finds no device (on a board, run from the PYNQ "
                              "image's environment, where XILINX_XRT is set); --device pynq-sim runs the "
                              "simulated board") from None


class PynqDevice:
    """The accelerator behind an overlay on a PYNQ board (or on a SimBoard passed as `device`)."""

    def __init__(self, config: HwConfig, overlay=None, *, board: str | BoardPreset | None = None,
                 device=None, dram_bytes: int = 64 << 20, register_map: RegisterMap | None = None,
                 download: bool = True, prevalidate: bool = True, default_timeout_s: float = 10.0,
                 poll_interval_s: float = 0.0):
        """`overlay`: a .bit path (with its .hwh, and .json for vtakit builds), a loaded
        pynq.Overlay, or None to look one up for `config` (fpga.overlay.find_overlay).
        `device`: a pynq.Device (default: pynq's active device, i.e. the board)."""
        pynq = import_pynq()
        self.config = config
        self.board = board_preset(board) if board is not None else None
        if self.board is not None:
            self.board.check_config(config)
        self.prevalidate = prevalidate
        self.default_timeout_s = default_timeout_s
        self.poll_interval_s = poll_interval_s
        self.pynq_device = device if device is not None else active_board(pynq)
        self.overlay = self._load_overlay(pynq, find_overlay(config) if overlay is None else overlay, download)
        check_hwh_config(self.overlay.ip_dict, config, Path(self.overlay.bitfile_name).name)
        self.register_map = register_map or discover(self.overlay.ip_dict)
        if self.register_map.flavour == VTA_HLS and config.extensions:
            raise DeviceError(f"config {config.label} has {', '.join(config.extensions)}, which VTA's HLS "
                              f"design does not (HwConfig.extensions)")
        self.pl_clock_mhz = pl_clock_mhz(self.overlay.ip_dict)
        self._mmio = {m: pynq.MMIO(self.register_map.base(m), BLOCK_SPAN, device=self.pynq_device)
                      for m in MODULES}
        self.dram = self._allocate(pynq, dram_bytes)
        self.physical_base = int(self.dram.physical_address)
        if self.physical_base + dram_bytes > 1 << 32:
            raise DeviceError(f"the DRAM image at {self.physical_base:#x} ends above 4 GiB; the accelerator's "
                              f"AXI addresses are 32-bit")
        self._top = 0
        self._stuck = False
        self._tokens = [0, 0, 0, 0]
        """The design's dependency tokens between runs, as the token replay computes them."""

    # ------------------------------------------------------------------ set-up
    def _load_overlay(self, pynq, overlay, download: bool):
        if isinstance(overlay, (str, Path)):
            files = overlay_files(overlay)
            check_overlay(files, self.config, self.board)
            try:
                return pynq.Overlay(str(files.bit), download=download, device=self.pynq_device)
            except (RuntimeError, OSError, ValueError, KeyError) as e:
                raise DeviceError(f"pynq could not load {files.bit.name}: {e}") from None
        if not hasattr(overlay, "ip_dict") or not hasattr(overlay, "bitfile_name"):
            raise DeviceError(f"{overlay!r} is neither a .bit path nor a pynq.Overlay")
        check_overlay(overlay_files(overlay.bitfile_name), self.config, self.board)
        return overlay

    def _allocate(self, pynq, nbytes: int):
        try:
            return pynq.allocate((nbytes,), dtype=np.uint8, target=self.pynq_device, cacheable=True)
        except (RuntimeError, MemoryError, DeviceError) as e:
            raise DeviceError(f"pynq.allocate of the {nbytes >> 20} MiB DRAM image failed ({e}); "
                              f"pass a smaller dram_bytes or give the board more CMA") from None

    # ------------------------------------------------------------------ Device protocol
    def alloc(self, nbytes: int, align: int = 4096) -> int:
        """Bump allocation in the DRAM image; returns the image-relative byte address."""
        addr = round_up(self._top, align)
        if addr + nbytes > self.dram.size:
            raise DeviceError(f"out of board memory: {nbytes} bytes requested, {self.dram.size - addr} free in "
                              f"the {self.dram.size >> 20} MiB DRAM image (dram_bytes=)")
        self._top = addr + nbytes
        return addr

    def reset_alloc(self) -> None:
        """Forget all allocations (the memory keeps its contents)."""
        self._top = 0

    def run(self, insn_addr: int, insn_count: int, timeout_s: float | None = None) -> RunStats:
        if self._stuck:
            self.reprogram()
        prog = self._check_program(insn_addr, insn_count)
        timeout = self.default_timeout_s if timeout_s is None else timeout_s
        image = self.dram[:max(self._top, insn_addr + insn_count * INSN_BYTES)]
        t0 = time.perf_counter()
        image.flush()
        self.write_reg("fetch", "INSN_COUNT", insn_count)
        self.write_reg("fetch", "INSN_ADDR", self.physical_base + insn_addr)
        for module, name in BASE_REGISTERS:
            self.write_reg(module, name, self.physical_base)
        self.write_reg("fetch", "CONTROL", START)
        for module in DATA_MODULES:
            self.write_reg(module, "CONTROL", AUTORESTART)
        try:
            self._wait(t0 + timeout, timeout, insn_addr, insn_count, prog)
        finally:
            for module in DATA_MODULES:
                self.write_reg(module, "CONTROL", AUTORESTART_OFF)
        image.invalidate()
        self._check_finish(prog)
        cycles = None
        if self.register_map.flavour == VTAKIT:
            cycles = self.read_reg("fetch", "CYCLES_HI") << 32 | self.read_reg("fetch", "CYCLES_LO")
        counters = static_counters(prog) if prog is not None else Counters()
        return RunStats(config=self.config, model="pynq", cycles=cycles, insns=insn_count,
                        gemm_uops=counters.gemm_uops, gemm_reset_uops=counters.gemm_reset_uops,
                        alu_uops=counters.alu_uops, bytes_read=counters.bytes_read,
                        bytes_written=counters.bytes_written, wall_s=time.perf_counter() - t0)

    # ------------------------------------------------------------------ registers
    def write_reg(self, module: str, name: str, value: int) -> None:
        self._mmio[module].write(register(module, name).offset, int(value) & 0xFFFF_FFFF)

    def read_reg(self, module: str, name: str) -> int:
        return int(self._mmio[module].read(register(module, name).offset))

    def registers(self) -> dict[str, int]:
        """Every register this flavour has, by `module.NAME`."""
        vtakit = self.register_map.flavour == VTAKIT
        return {f"{r.module}.{r.name}": self.read_reg(r.module, r.name)
                for r in REGISTERS if vtakit or not r.vtakit_only}

    def reprogram(self) -> None:
        """Download the overlay again: the PL's only reset (on-chip state is lost)."""
        self.overlay.download()
        self._stuck = False
        self._tokens = [0, 0, 0, 0]

    def close(self) -> None:
        if getattr(self, "dram", None) is not None:
            self.dram.freebuffer()
            self.dram = None

    # ------------------------------------------------------------------ internals
    def _check_program(self, insn_addr: int, insn_count: int) -> DecodedProgram | None:
        if insn_count <= 0:
            raise SimError(f"must be positive, got {insn_count}", field="insn_count")
        if insn_addr % INSN_BYTES or insn_addr < 0 or insn_addr + insn_count * INSN_BYTES > self.dram.size:
            raise SimError(f"instructions at {insn_addr:#x} ({insn_count}) are not {INSN_BYTES}-byte aligned "
                           f"inside the {self.dram.size >> 20} MiB DRAM image", field="insn_addr")
        if not self.prevalidate:
            return None
        return decode_for_sim(self.config, self.dram, insn_addr, insn_count)

    def _wait(self, deadline: float, timeout: float, insn_addr: int, insn_count: int,
              prog: DecodedProgram | None) -> None:
        """Poll as VTA's driver does: fetch's done bit first, then compute's done register."""
        fetch_done, polls = False, 0
        while True:
            if self.register_map.flavour == VTAKIT:
                error = self.read_reg("fetch", "ERROR")
                if error & 1:
                    self._stuck = True
                    raise self._design_error(error, prog)
            fetch_done = fetch_done or bool(self.read_reg("fetch", "CONTROL") & CTRL_DONE)
            if fetch_done and self.read_reg("compute", "DONE") & 1:
                return
            if time.perf_counter() > deadline:
                self._stuck = True
                raise DeviceTimeout(self._timeout_message(timeout, polls, insn_addr, insn_count, prog))
            polls += 1
            if self.poll_interval_s:
                time.sleep(self.poll_interval_s)

    def _check_finish(self, prog: DecodedProgram | None) -> None:
        """FINISH only ends the compute queue: an instruction left waiting for a token never ran
        (its output is missing), so replay the token flow without data (sim.functional)."""
        if prog is None:
            return
        try:
            self._tokens = replay_tokens(prog, self._tokens)
        except DeadlockError:
            self._stuck = True  # the waiting instruction still sits in its queue
            raise

    def _design_error(self, error: int, prog: DecodedProgram | None) -> SimError:
        index = self.read_reg("fetch", "ERROR_INDEX")
        field, message = ERROR_CODES.get(error >> 4 & 0xF, ("", f"error code {error >> 4 & 0xF}"))
        mnemonic = prog.mnemonic(index) if prog is not None and index < prog.n else None
        return SimError(f"the accelerator halted: {message}", insn_index=index, field=field or None,
                        mnemonic=mnemonic)

    def _timeout_message(self, timeout: float, polls: int, insn_addr: int, insn_count: int,
                         prog: DecodedProgram | None) -> str:
        regs = " ".join(f"{k}={v:#x}" for k, v in self.registers().items())
        return (f"PYNQ run of {insn_count} instructions at physical {self.physical_base + insn_addr:#x} did not "
                f"finish in {timeout:g} s ({polls} polls); registers: {regs}"
                + self._diagnosis(insn_addr, insn_count, prog))

    def _diagnosis(self, insn_addr: int, insn_count: int, prog: DecodedProgram | None) -> str:
        """What the functional model makes of the program (the token flow does not depend on data)."""
        if prog is None:
            return ""
        try:
            execute(Machine(self.config, np.array(self.dram, copy=True)), insn_addr, insn_count,
                    model="functional", timeout_s=10.0)
        except DeadlockError as e:
            return f"; the functional model finds a deadlock: {e}"
        except (SimError, DeviceTimeout) as e:
            return f"; the functional model: {e}"
        return "; the functional model runs it to FINISH (the accelerator is stuck or slower than the timeout)"


def _register() -> None:
    register_device("pynq", PynqDevice, description="a PYNQ board through pynq's API")


_register()

