"""Bit layouts of instruction words and micro-ops, derived from a HwConfig.

This is the single source of truth for where every field sits: the encoder, the
decoder, the simulators and (later) the generated RTL package all read these
tables.  Fields are packed from bit 0 upward in 64-bit units; a field that would
straddle a unit boundary starts at the next unit instead (GCC's bit-field rule
on x86-64, which is what VTA's C structs compile to).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from vtakit.errors import ConfigError

if TYPE_CHECKING:
    from vtakit.isa.config import HwConfig

INSN_BITS = 128
INSN_BYTES = 16
UOP_BITS = 32
LOOP_ITER_BITS = 14
MEM_SRAM_BITS = 16
MEM_DRAM_BITS = 32
MEM_SIZE_BITS = 16
MEM_PAD_BITS = 4
ALU_OPCODE_BITS = 3
ALU_IMM_BITS = 16


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    width: int
    signed: bool = False

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1

    @property
    def min(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else self.mask


@dataclass(frozen=True)
class Layout:
    """An ordered set of fields packed into a word of `word_bits`."""

    name: str
    fields: tuple[Field, ...]
    word_bits: int

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def used_bits(self) -> int:
        return max(f.offset + f.width for f in self.fields)


HEAD = (("opcode", 3), ("pop_prev", 1), ("pop_next", 1), ("push_prev", 1), ("push_next", 1))


def pack(name: str, specs, word_bits: int, unit_bits: int = 64) -> Layout:
    """Place (name, width[, signed]) specs with the C bit-field rule; ConfigError if they overflow."""
    placed = []
    pos = 0
    for spec in specs:
        fname, width = spec[0], spec[1]
        signed = len(spec) > 2 and spec[2]
        if width <= 0:
            raise ConfigError(f"{name} field {fname!r} would be {width} bits wide", field=fname)
        if pos // unit_bits != (pos + width - 1) // unit_bits:
            pos = (pos // unit_bits + 1) * unit_bits
        if pos + width > word_bits:
            raise ConfigError(
                f"{name} field {fname!r} needs bits {pos}..{pos + width - 1}, beyond the "
                f"{word_bits}-bit word; shrink the buffers that set its width", field=fname)
        placed.append(Field(fname, pos, width, signed))
        pos += width
    return Layout(name, tuple(placed), word_bits)


def _uop_src_bits(cfg: "HwConfig") -> int:
    return max(cfg.log_acc_depth, cfg.log_inp_depth)


@lru_cache(maxsize=None)
def mem_layout(cfg: "HwConfig") -> Layout:
    return pack("LOAD/STORE", HEAD + (
        ("mem_id", 3), ("sram_base", MEM_SRAM_BITS), ("dram_base", MEM_DRAM_BITS),
        ("y_size", MEM_SIZE_BITS), ("x_size", MEM_SIZE_BITS), ("x_stride", MEM_SIZE_BITS),
        ("y_pad_0", MEM_PAD_BITS), ("y_pad_1", MEM_PAD_BITS),
        ("x_pad_0", MEM_PAD_BITS), ("x_pad_1", MEM_PAD_BITS),
    ), INSN_BITS)


def _loop_head(cfg: "HwConfig"):
    return HEAD + (
        ("reset", 1), ("uop_bgn", cfg.log_uop_depth), ("uop_end", cfg.log_uop_depth + 1),
        ("iter_out", LOOP_ITER_BITS), ("iter_in", LOOP_ITER_BITS),
    )


@lru_cache(maxsize=None)
def gemm_layout(cfg: "HwConfig") -> Layout:
    return pack("GEMM", _loop_head(cfg) + (
        ("dst_factor_out", cfg.log_acc_depth), ("dst_factor_in", cfg.log_acc_depth),
        ("src_factor_out", cfg.log_inp_depth), ("src_factor_in", cfg.log_inp_depth),
        ("wgt_factor_out", cfg.log_wgt_depth), ("wgt_factor_in", cfg.log_wgt_depth),
    ), INSN_BITS)


@lru_cache(maxsize=None)
def alu_layout(cfg: "HwConfig") -> Layout:
    return pack("ALU", _loop_head(cfg) + (
        ("dst_factor_out", cfg.log_acc_depth), ("dst_factor_in", cfg.log_acc_depth),
        ("src_factor_out", cfg.log_acc_depth), ("src_factor_in", cfg.log_acc_depth),
        ("alu_opcode", ALU_OPCODE_BITS), ("use_imm", 1), ("imm", ALU_IMM_BITS, True),
    ), INSN_BITS)


@lru_cache(maxsize=None)
def finish_layout(cfg: "HwConfig") -> Layout:
    return pack("FINISH", HEAD, INSN_BITS)


@lru_cache(maxsize=None)
def uop_layout(cfg: "HwConfig") -> Layout:
    return pack("micro-op", (
        ("dst", cfg.log_acc_depth), ("src", _uop_src_bits(cfg)), ("wgt", cfg.log_wgt_depth),
    ), UOP_BITS, unit_bits=UOP_BITS)


def check_layouts(cfg: "HwConfig") -> None:
    """Raise ConfigError if any instruction or micro-op field no longer fits its word."""
    for make in (mem_layout, gemm_layout, alu_layout, finish_layout, uop_layout):
        try:
            make(cfg)
        except ConfigError as e:
            widths = (f"log2 depths: uop {cfg.log_uop_depth}, inp {cfg.log_inp_depth}, "
                      f"wgt {cfg.log_wgt_depth}, acc {cfg.log_acc_depth}")
            raise ConfigError(f"{e.detail} ({widths})", field=e.field) from None
