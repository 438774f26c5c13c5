"""A PYNQ board that is not there: a `pynq.Device` whose programmable logic is the Verilator RTL.

With it, `pynq.Overlay`, `pynq.allocate` and `pynq.MMIO` run for real in tests: the overlay's
.hwh is parsed by pynq's own parser, allocations are numpy views of a simulated CMA window with
physical addresses, and every MMIO access is an AXI-Lite transaction on the RTL's register
slave (through hw/'s harness, the same libvta.so RtlDevice uses).  Its DDR is one numpy array
indexed by physical address; the CPU's view of the CMA window is a second array, and only
`flush` / `invalidate` copy between the two, as a non-coherent cache would, so a driver that
forgets either reads stale data here as it would on the board.  Time passes in the PL while the
driver polls: each register read while a run is going clocks the RTL a slice further.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import pynq
from pynq.buffer import PynqBuffer

from vtakit.errors import DeviceError
from vtakit.hw.boards import ZYNQ, BoardPreset, board as board_preset, board_for
from vtakit.fpga.driver import PynqDevice
from vtakit.fpga.hwh import hwh_text
from vtakit.fpga.overlay import (bit_part_code, overlay_files, read_bit_header, read_sidecar, sidecar_dict,
                                 sim_bit_data, simulated_config, write_bit)
from vtakit.fpga.regmap import BLOCK_SPAN, MODULES, VTA_HLS, VTAKIT, RegisterMap, discover
from vtakit.hw.build import build, cache_root
from vtakit.hw.device import RUN_FINISHED, RUN_HANG, RUN_RUNNING, load_harness
from vtakit.isa.config import HwConfig
from vtakit.isa.arith import round_up

CMA_BASE = 0x1000_0000
"""Physical address of the simulated CMA window (inside every preset's DDR)."""
IDLE, RUNNING, FINISHED, HALTED, HUNG = "idle", "running", "finished", "halted", "hung"


class ProgrammedLogic:
    """The configured PL: the RTL of one configuration, its AXI-Lite windows, and its run state."""

    def __init__(self, cfg: HwConfig, ddr: np.ndarray, regmap: RegisterMap, cycles_per_poll: int,
                 hang_cycles: int):
        self.config, self.regmap, self.ddr = cfg, regmap, ddr
        self.cycles_per_poll, self.hang_cycles = cycles_per_poll, hang_cycles
        self.lib = load_harness(build(cfg))
        self.handle = self.lib.vta_create(ddr.ctypes.data, ddr.size, cfg.mem_latency)
        self.state = IDLE
        self.cycles = 0
        """Cycles of the current (or last) run, as the harness counts them."""

    def rtl_offset(self, address: int) -> int | None:
        """The RTL register offset an MMIO address decodes to, None outside every window."""
        for k, base in enumerate(self.regmap.bases):
            if base <= address < base + BLOCK_SPAN:
                return k * BLOCK_SPAN + address - base
        return None

    def write(self, offset: int, value: int) -> None:
        if offset == 0 and value & 1 and self.state != RUNNING:
            # fetch's start: the harness writes count, address and start and marks the run's first cycle
            count, addr = self._reg(0x10), self._reg(0x18)
            self.lib.vta_start(self.handle, addr, count)
            self.state, self.cycles = RUNNING, 0
        else:
            self.lib.vta_write_reg(self.handle, offset, value & 0xFFFF_FFFF)

    def read(self, offset: int) -> int:
        if self.state == RUNNING:
            self._advance()
        return self._reg(offset)

    def _reg(self, offset: int) -> int:
        return int(self.lib.vta_read_reg(self.handle, offset))

    def _advance(self) -> None:
        cycles, bad_addr = ctypes.c_uint64(0), ctypes.c_uint64(0)
        status = self.lib.vta_step(self.handle, self.cycles_per_poll, self.hang_cycles, ctypes.byref(cycles),
                                   ctypes.byref(bad_addr))
        self.cycles = int(cycles.value)
        if status == RUN_FINISHED:
            self.state = FINISHED
        elif status == RUN_HANG:
            self.state = HUNG            # stays un-done: the driver's timeout has to notice
        elif status != RUN_RUNNING:
            self.state = HALTED          # the design flagged an error (its error register says which)

    def close(self) -> None:
        if self.handle:
            self.lib.vta_destroy(self.handle)
            self.handle = None


class SimMemory:
    """The simulated CMA: physically contiguous buffers for pynq.allocate, first fit, 4 KiB pages."""

    def __init__(self, board: "SimBoard"):
        self.board = board
        self.blocks: dict[int, int] = {}     # offset in the window -> bytes

    def allocate(self, shape, dtype, cacheable: bool = True, **kwargs) -> PynqBuffer:
        """Always cacheable here: the CPU's view is kept apart from DDR, as pynq's cacheable buffers are."""
        if kwargs:
            raise TypeError(f"unexpected arguments to allocate: {', '.join(kwargs)}")
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        offset = self._claim(round_up(max(nbytes, 1), 4096))
        buf = PynqBuffer(shape, dtype, buffer=self.board.host, offset=offset, device=self.board,
                         device_address=self.board.cma_base + offset, bo=offset, coherent=False)
        buf.memory, buf.pointer, buf.return_to = self, (offset,), self   # freed through return_pointer
        return buf

    def return_pointer(self, pointer: tuple[int]) -> None:
        self.blocks.pop(pointer[0], None)

    def _claim(self, nbytes: int) -> int:
        cursor = 0
        for start in sorted(self.blocks):
            if start - cursor >= nbytes:
                break
            cursor = start + self.blocks[start]
        if cursor + nbytes > self.board.host.size:
            raise DeviceError(f"simulated CMA exhausted: {nbytes} bytes requested, window is "
                              f"{self.board.host.size >> 20} MiB")
        self.blocks[cursor] = nbytes
        return cursor

    @property
    def mem_used(self) -> int:
        return sum(self.blocks.values())


class SimBoard(pynq.Device):
    """A `pynq.Device` backed by the RTL: pass it as `device=` / `target=` to pynq's API."""

    def __init__(self, board: str | BoardPreset = "pynq-z1", *, cma_bytes: int = 128 << 20,
                 cycles_per_poll: int = 1 << 16, hang_cycles: int = 200_000):
        preset = board_preset(board)
        super().__init__(f"vtakit_sim_{preset.name}")
        self.board = preset
        self.name = f"vtakit-sim-{preset.name}"
        self.capabilities = {"REGISTER_RW": True, "MEMORY_MAPPED": False, "CALLABLE": False}
        self.arch = "armv7l" if preset.ps == ZYNQ else "aarch64"
        if CMA_BASE + cma_bytes > preset.ddr_bytes:
            raise DeviceError(f"a {cma_bytes >> 20} MiB CMA window does not fit the {preset.title}'s DDR")
        self.cma_base = CMA_BASE
        self.ddr = np.zeros(CMA_BASE + cma_bytes, np.uint8)     # what the PL sees, by physical address
        self.host = np.zeros(cma_bytes, np.uint8)               # the CPU's (cached) view of the window
        self.default_memory = SimMemory(self)
        self.cycles_per_poll, self.hang_cycles = cycles_per_poll, hang_cycles
        self.bitfile_name, self.timestamp = None, ""
        self.clear_dict()
        self.pl: ProgrammedLogic | None = None
        self.counters = {"flush_bytes": 0, "invalidate_bytes": 0, "reads": 0, "writes": 0, "downloads": 0}

    # ------------------------------------------------------------- bitstreams
    def get_bitfile_metadata(self, bitfile_name: str, partial: bool = False):
        """pynq's own parser over the .hwh, as EmbeddedDevice does on a board (without XRT)."""
        from pynqmetadata.frontends import Metadata  # lazy: pynqmetadata (comes with pynq)
        from pynqmetadata.views.runtime import RuntimeMetadataParser  # lazy: pynqmetadata

        hwh = Path(bitfile_name).with_suffix(".hwh")
        if not hwh.is_file():
            raise DeviceError(f"{hwh} not found: the simulated board reads the block design from it")
        try:
            parser = RuntimeMetadataParser(Metadata(input=str(hwh)))
        except Exception as e:  # pynqmetadata raises many types; any of them means the file is unusable
            raise DeviceError(f"{hwh}: pynq cannot parse it ({type(e).__name__}: {e})") from None
        # Overlay.download programs enabled PL clocks through the Zynq's SLCR registers, which this
        # board does not model (the harness clocks the RTL); keep the figures, drop the enable.
        for clock in parser.clock_dict.values():
            clock["enabled_in_design"] = clock.pop("enable", 0)
        return parser

    def download(self, bitstream, parser=None) -> None:
        """Program the PL: the RTL of the configuration the bitstream names, at the .hwh's addresses."""
        path = Path(bitstream.bitfile_name)
        parser = parser or self.get_bitfile_metadata(str(path))
        header = read_bit_header(path)
        if self.board.device.removeprefix("xc") not in str(header.get("part", "")).lower():
            raise DeviceError(f"{path.name} is for part {header.get('part')}, this board has {self.board.part}")
        cfg = simulated_config(header)
        if cfg is None:
            sidecar = path.with_suffix(".json")
            if not sidecar.is_file():
                raise DeviceError(f"{path.name} is a real bitstream with no {sidecar.name}: the simulated board "
                                  f"needs the configuration to build the RTL of")
            cfg = HwConfig.from_dict(read_sidecar(sidecar)["config"])
        regmap = discover(parser.ip_dict)
        self.release()
        self.pl = ProgrammedLogic(cfg, self.ddr, regmap, self.cycles_per_poll, self.hang_cycles)
        self.counters["downloads"] += 1
        self.post_download(bitstream, parser, self.name)

    # ------------------------------------------------------------- registers
    def _decode(self, address: int) -> int:
        if self.pl is None:
            raise DeviceError(f"simulated {self.board.title}: no bitstream loaded (access at {address:#x})")
        offset = self.pl.rtl_offset(address)
        if offset is None:
            raise DeviceError(f"simulated {self.board.title}: no IP answers at physical address {address:#x} "
                              f"(the overlay maps {self.pl.regmap.describe()})")
        return offset

    def read_registers(self, address: int, length: int) -> bytes:
        words = [self.pl_read(a) for a in range(address, address + length, 4)] if length else []
        return struct.pack(f"<{len(words)}I", *words)[:length]

    def write_registers(self, address: int, data: bytes) -> None:
        data = bytes(data) + b"\0" * (-len(data) % 4)
        for k in range(0, len(data), 4):
            offset = self._decode(address + k)
            self.counters["writes"] += 1
            self.pl.write(offset, struct.unpack_from("<I", data, k)[0])

    def pl_read(self, address: int) -> int:
        offset = self._decode(address)
        self.counters["reads"] += 1
        return self.pl.read(offset)

    # ------------------------------------------------------------- caches
    def _window(self, ptr: int, size: int) -> slice:
        start = ptr - self.host.ctypes.data
        if start < 0 or start + size > self.host.size:
            raise DeviceError(f"cache maintenance outside the simulated CMA window ({size} bytes at {ptr:#x})")
        return slice(start, start + size)

    def flush(self, bo, offset: int, ptr: int, size: int) -> None:
        """CPU writes reach DDR (the PL reads DDR, never the CPU's view)."""
        w = self._window(ptr, size)
        self.ddr[self.cma_base + w.start:self.cma_base + w.stop] = self.host[w]
        self.counters["flush_bytes"] += size

    def invalidate(self, bo, offset: int, ptr: int, size: int) -> None:
        """The CPU's view re-reads DDR (what the PL wrote becomes visible)."""
        w = self._window(ptr, size)
        self.host[w] = self.ddr[self.cma_base + w.start:self.cma_base + w.stop]
        self.counters["invalidate_bytes"] += size

    def release(self) -> None:
        """Unprogram the PL (frees the RTL model)."""
        if self.pl is not None:
            self.pl.close()
            self.pl = None

    def close(self) -> None:
        self.release()


# ------------------------------------------------------------------ simulated overlays
def write_sim_overlay(directory: str | Path, board: str | BoardPreset, cfg: HwConfig,
                      flavour: str = VTAKIT) -> Path:
    """A simulated overlay for `cfg` on `board`: .bit (carrying the config) and .hwh, plus the
    .json a `vtakit fpga project` build has (vtakit flavour) or VTA's file naming (vta-hls).
    Returns the .bit path; files that already exist with the same content are kept."""
    if flavour not in (VTAKIT, VTA_HLS):
        raise DeviceError(f"unknown overlay flavour {str(flavour)[:40]!r}; use {VTAKIT!r} or {VTA_HLS!r}")
    preset = board_preset(board)
    preset.check_config(cfg)
    if flavour == VTAKIT:
        stem, regmap = preset.overlay_stem(cfg), RegisterMap.vtakit(preset.register_base)
    else:
        stem = cfg.bitstream_name
        regmap = RegisterMap.vta_hls(*(preset.register_base + BLOCK_SPAN * k for k in range(len(MODULES))))
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        staged = Path(tmp)
        write_bit(staged / f"{stem}.bit", stem, bit_part_code(preset.part), sim_bit_data(cfg))
        (staged / f"{stem}.hwh").write_text(hwh_text(preset, cfg, regmap, stem))
        if flavour == VTAKIT:
            (staged / f"{stem}.json").write_text(json.dumps(sidecar_dict(preset, cfg, flavour), indent=2) + "\n")
        for f in staged.iterdir():
            os.replace(f, out / f.name)   # atomic: parallel test workers may write the same overlay
    return overlay_files(out / f"{stem}.bit").bit


def sim_overlay_dir(cfg: HwConfig) -> Path:
    return cache_root() / "fpga" / "sim-overlays" / cfg.fingerprint()


def simulated_pynq(cfg: HwConfig, board: str | BoardPreset | None = None, *, flavour: str = VTAKIT,
                   cma_bytes: int = 128 << 20, hang_cycles: int = 200_000, **driver_args):
    """A PynqDevice on a SimBoard with a simulated overlay for `cfg` (what `--device pynq-sim` runs)."""
    preset = board_preset(board) if board is not None else board_for(cfg)
    bit = write_sim_overlay(sim_overlay_dir(cfg), preset, cfg, flavour)
    sim = SimBoard(preset, cma_bytes=cma_bytes, hang_cycles=hang_cycles)
    driver_args.setdefault("dram_bytes", min(64 << 20, cma_bytes))
    driver_args.setdefault("default_timeout_s", 120.0)
    return PynqDevice(cfg, bit, board=preset, device=sim, **driver_args)
