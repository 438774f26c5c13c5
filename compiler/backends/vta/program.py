"""A compiled operator as plain data: unlinked instruction words, relocations, tensor specs, micro-ops.

`CompiledOp` (codegen) carries the loop nest and instruction objects it was
built from; a `Program` is what remains when only the bytes matter: what a
compiled network module stores on disk and links into a device's DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from vtakit.isa.fields import mem_layout
from vtakit.isa.opcodes import MemId


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    mem: MemId
    planes: int = 1

    def nbytes(self, cfg: HwConfig) -> int:
        return int(np.prod(self.shape)) * self.planes * cfg.elem_bytes(self.mem)

    def to_dict(self) -> dict:
        return dict(name=self.name, shape=list(self.shape), mem=int(self.mem), planes=self.planes)

    @classmethod
    def from_dict(cls, d: dict) -> "TensorSpec":
        return cls(d["name"], tuple(d["shape"]), MemId(d["mem"]), d["planes"])


def link_words(cfg: HwConfig, words: np.ndarray, relocs: dict[str, np.ndarray], tensors: dict[str, TensorSpec],
               bases: dict[str, int], name: str) -> bytes:
    """Instruction bytes with every relocated dram_base made absolute (`bases`: tensor -> byte address)."""
    words = words.copy()
    field = mem_layout(cfg)["dram_base"]
    for tensor, idx in relocs.items():
        eb = cfg.elem_bytes(tensors[tensor].mem)
        if bases[tensor] % eb:
            raise CompileError(f"tensor {tensor!r} at byte {bases[tensor]:#x} is not aligned to its "
                               f"{eb}-byte elements", op=name)
        lo = words[idx, 0]
        old = (lo >> np.uint64(field.offset)) & np.uint64(field.mask)
        new = old + np.uint64(bases[tensor] // eb)
        if np.any(new > field.mask):
            raise CompileError(f"tensor {tensor!r} lies beyond what dram_base addresses", op=name)
        lo &= ~np.uint64(field.mask << field.offset)
        words[idx, 0] = lo | (new << np.uint64(field.offset))
    return words.astype("<u8").tobytes()


@dataclass(frozen=True)
class Program:
    name: str
    words: np.ndarray  # (instructions, 2) uint64, DRAM addresses relative to each tensor
    relocs: dict[str, np.ndarray]  # tensor -> indices of the instructions that address it
    tensors: dict[str, TensorSpec]  # includes "uops" (the micro-op table) and the output
    uops: np.ndarray  # encoded micro-op table, uint8
    output: str

    @property
    def instructions(self) -> int:
        return len(self.words)

    def link(self, cfg: HwConfig, bases: dict[str, int]) -> bytes:
        return link_words(cfg, self.words, self.relocs, self.tensors, bases, self.name)
