"""Instructions and micro-ops as frozen dataclasses.

Field names are those of ISA.md (and of the layouts in `fields.py`), so an
instruction converts to and from its bit fields by name.  Dependency flags are
ordinary fields on every instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from vtakit.isa.opcodes import MEM_MNEMONIC, AluOp, MemId, Module, Opcode, module_of


@dataclass(frozen=True, slots=True)
class _MemInsn:
    """Fields LOAD and STORE share (one layout in ISA.md)."""

    mem: MemId
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def mnemonic(self) -> str:
        return f"{self.opcode.name}.{MEM_MNEMONIC[MemId(self.mem)]}"


@dataclass(frozen=True, slots=True)
class Load(_MemInsn):
    """2-D DMA from DRAM into an on-chip buffer, with zero padding."""

    opcode = Opcode.LOAD

    @property
    def module(self) -> Module:
        return module_of(Opcode.LOAD, self.mem)


@dataclass(frozen=True, slots=True)
class Store(_MemInsn):
    """2-D strided store of accumulator entries, truncated to the output width."""

    opcode = Opcode.STORE
    module = Module.STORE


@dataclass(frozen=True, slots=True)
class Gemm:
    """acc[dst] += inp[src] x wgt[wgt]^T over two affine loops and a micro-op range."""

    uop_bgn: int
    uop_end: int
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0
    reset: bool = False
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    opcode = Opcode.GEMM
    module = Module.COMPUTE

    @property
    def mnemonic(self) -> str:
        return "GEMM"


@dataclass(frozen=True, slots=True)
class Alu:
    """acc[dst] = op(acc[dst], imm or acc[src]) lanewise over the same loop scheme."""

    op: AluOp
    uop_bgn: int
    uop_end: int
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0
    use_imm: bool = False
    imm: int = 0
    reset: bool = False
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    opcode = Opcode.ALU
    module = Module.COMPUTE

    @property
    def mnemonic(self) -> str:
        return f"ALU.{AluOp(self.op).name}"


@dataclass(frozen=True, slots=True)
class Finish:
    """Ends the run once it executes (compute module)."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    opcode = Opcode.FINISH
    module = Module.COMPUTE

    @property
    def mnemonic(self) -> str:
        return "FINISH"


@dataclass(frozen=True, slots=True)
class Uop:
    """One micro-op: buffer indices of the accumulator, input (or acc for ALU) and weight."""

    dst: int
    src: int = 0
    wgt: int = 0


Insn = Union[Load, Store, Gemm, Alu, Finish]
INSN_TYPES = (Load, Store, Gemm, Alu, Finish)

