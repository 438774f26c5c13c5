"""Program images: instructions plus the DRAM they run against, in one `.npz` file.

A program image is what every device runs: the simulators, the RTL and the
board.  The `.npz` format (the user guide's ISA page, "Program images") holds

    format       "vtakit-program/1"
    config       HwConfig as JSON text
    dram         uint8[n], the initial DRAM contents (byte address 0 = index 0)
    insn_addr    byte address of the first instruction (16-byte aligned)
    insn_count   number of instructions
    name         free text
    regions      JSON text: {name: {"addr": byte address, "shape": [...], "dtype": "int8"}}

`ProgramBuilder` lays out data, micro-ops and instructions into such an image.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from vtakit.errors import IsaError
from vtakit.files import check_archive, regular_file
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import decode_program, encode_program, encode_uops
from vtakit.isa.insn import Finish, Insn, Load, Uop
from vtakit.isa.fields import INSN_BYTES
from vtakit.isa.opcodes import MemId
from vtakit.isa.arith import round_up

MAX_IMAGE_BYTES = 1 << 30
"""A program image (`.npz`) may expand to at most this (1 GiB): a 3 MB archive of zeros can declare
gigabytes of DRAM."""

FORMAT = "vtakit-program/1"


@dataclass(frozen=True)
class Region:
    """A named tensor in DRAM (an input, weights, an expected output...)."""

    addr: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def read(self, dram: np.ndarray) -> np.ndarray:
        return dram[self.addr:self.addr + self.nbytes].view(self.dtype).reshape(self.shape).copy()


@dataclass
class ProgramImage:
    config: HwConfig
    dram: np.ndarray
    insn_addr: int
    insn_count: int
    name: str = ""
    regions: dict[str, Region] = field(default_factory=dict)

    def insn_bytes(self) -> bytes:
        end = self.insn_addr + self.insn_count * INSN_BYTES
        return self.dram[self.insn_addr:end].tobytes()

    def instructions(self) -> list[Insn]:
        return decode_program(self.insn_bytes(), self.config)

    def read(self, name: str, dram: np.ndarray | None = None) -> np.ndarray:
        """A region's contents, from the image or from a DRAM after a run."""
        if name not in self.regions:
            raise IsaError(f"program has no region {name!r} (has: {', '.join(self.regions) or 'none'})")
        return self.regions[name].read(self.dram if dram is None else dram)

    def save(self, path: "str | Path") -> None:
        regions = {k: {"addr": r.addr, "shape": list(r.shape), "dtype": r.dtype}
                   for k, r in self.regions.items()}
        np.savez_compressed(
            path, format=np.array(FORMAT), config=np.array(self.config.to_json()),
            dram=self.dram, insn_addr=np.int64(self.insn_addr), insn_count=np.int64(self.insn_count),
            name=np.array(self.name), regions=np.array(json.dumps(regions)))

    @staticmethod
    def load(path: "str | Path") -> "ProgramImage":
        """An image saved by `save`; a FIFO, a device or an archive declaring more than MAX_IMAGE_BYTES
        is refused before anything is read or decompressed."""
        regular_file(path, "program file", IsaError)
        if zipfile.is_zipfile(path):
            check_archive(path, "program image", MAX_IMAGE_BYTES, IsaError)
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise IsaError(f"program file {str(path)!r} does not exist") from None
        except (OSError, ValueError) as e:
            raise IsaError(f"{path}: not a program image ({e})") from None
        for key in ("format", "config", "dram", "insn_addr", "insn_count"):
            if key not in data:
                raise IsaError(f"{path}: program image lacks {key!r}")
        if str(data["format"]) != FORMAT:
            raise IsaError(f"{path}: unsupported format {str(data['format'])!r} (expected {FORMAT})")
        try:
            regions = json.loads(str(data["regions"])) if "regions" in data else {}
            config = json.loads(str(data["config"]))
        except ValueError as e:
            raise IsaError(f"{path}: the image's config or regions are not JSON ({e})") from None
        if not isinstance(config, dict) or not isinstance(regions, dict):
            raise IsaError(f"{path}: the image's config and regions must be JSON objects")
        try:
            return ProgramImage(
                config=HwConfig.from_dict(config),
                dram=np.ascontiguousarray(data["dram"], dtype=np.uint8),
                insn_addr=int(data["insn_addr"]), insn_count=int(data["insn_count"]),
                name=str(data.get("name", "")),
                regions={k: Region(int(v["addr"]), tuple(int(d) for d in v["shape"]), str(v["dtype"]))
                         for k, v in regions.items()},
            )
        except (KeyError, TypeError, ValueError) as e:
            raise IsaError(f"{path}: a malformed field in the image ({type(e).__name__}: {e})") from None


class ProgramBuilder:
    """Lays out data, micro-ops and instructions into a ProgramImage.

    Data goes first (each block aligned), the instruction stream last.  Element
    placement returns DRAM addresses in elements of the memory type, which is
    what LOAD/STORE instructions take.
    """

    def __init__(self, cfg: HwConfig, name: str = ""):
        self.cfg = cfg
        self.name = name
        self.insns: list[Insn] = []
        self.regions: dict[str, Region] = {}
        self._blocks: list[tuple[int, bytes]] = []
        self._top = 0

    def alloc(self, nbytes: int, align: int = 64) -> int:
        """Reserve zeroed bytes; returns the byte address."""
        addr = round_up(self._top, align)
        self._top = addr + nbytes
        return addr

    def place(self, data: "np.ndarray | bytes", align: int = 64) -> int:
        """Copy bytes into DRAM; returns the byte address."""
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        addr = self.alloc(len(raw), align)
        self._blocks.append((addr, raw))
        return addr

    def place_elems(self, mem: MemId, data: np.ndarray, name: str | None = None) -> int:
        """Place whole elements of a memory type; returns their element address."""
        elem = self.cfg.elem_bytes(mem)
        if data.nbytes % elem:
            raise IsaError(f"{data.nbytes} bytes is not a whole number of {MemId(mem).name} "
                           f"elements ({elem} bytes)")
        addr = self.place(np.ascontiguousarray(data), align=max(64, elem))
        if name:
            self.regions[name] = Region(addr, tuple(data.shape), data.dtype.str)
        return addr // elem

    def reserve_elems(self, mem: MemId, count: int, name: str | None = None,
                      shape: Sequence[int] | None = None, dtype: str | None = None) -> int:
        """Zeroed room for `count` elements (e.g. an output); returns the element address."""
        elem = self.cfg.elem_bytes(mem)
        addr = self.alloc(count * elem, align=max(64, elem))
        if name:
            self.regions[name] = Region(addr, tuple(shape or (count * elem,)), dtype or "|u1")
        return addr // elem

    def place_uops(self, uops: "Iterable[Uop] | np.ndarray") -> int:
        """Encode and place micro-ops; returns their element address for LOAD.UOP."""
        return self.place(encode_uops(uops, self.cfg), align=64) // 4

    def emit(self, *insns: Insn) -> None:
        self.insns.extend(insns)

    def finish(self, *, load_pops: int = 0, compute_pops: int = 0) -> None:
        """End the program leaving every token queue empty.

        The load module pops the `load_pops` tokens compute still owes it and
        hands compute one token; compute pops the `compute_pops` tokens the store
        module pushed back; FINISH waits for both.  No-op LOADs (x_size 0) carry
        the tokens.
        """
        for _ in range(load_pops):
            self.emit(Load(MemId.INP, 0, 0, 0, 0, 0, pop_next=True))
        self.emit(Load(MemId.INP, 0, 0, 0, 0, 0, push_next=True))
        for _ in range(compute_pops - 1):
            self.emit(Load(MemId.UOP, 0, 0, 0, 0, 0, pop_next=True))
        self.emit(Finish(pop_prev=True, pop_next=compute_pops > 0))

    def build(self, dram_bytes: int | None = None) -> ProgramImage:
        code = encode_program(self.insns, self.cfg)
        insn_addr = self.alloc(len(code), align=64)
        size = max(self._top, dram_bytes or 0)
        size = round_up(size, 4096)
        dram = np.zeros(size, dtype=np.uint8)
        for addr, raw in self._blocks:
            dram[addr:addr + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        dram[insn_addr:insn_addr + len(code)] = np.frombuffer(code, dtype=np.uint8)
        return ProgramImage(self.cfg, dram, insn_addr, len(self.insns), self.name, dict(self.regions))
