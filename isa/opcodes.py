"""Numeric codes of the ISA (ISA.md): opcodes, memory types, ALU operations, modules."""

from __future__ import annotations

from enum import IntEnum


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemId(IntEnum):
    """Memory type of a LOAD/STORE; also selects the element size of its DRAM address."""

    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


class Module(IntEnum):
    """The three execution modules, in token order load -> compute -> store."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2

    @property
    def label(self) -> str:
        return self.name.lower()


# Short mnemonic suffixes used by the assembler for memory types.
MEM_MNEMONIC = {
    MemId.UOP: "UOP",
    MemId.WGT: "WGT",
    MemId.INP: "INP",
    MemId.ACC: "ACC",
    MemId.OUT: "OUT",
    MemId.ACC_8BIT: "ACC8",
}


def module_of(opcode: int, mem_id: int) -> Module:
    """Which module executes an instruction (the fetch module's dispatch rule)."""
    if opcode == Opcode.STORE:
        return Module.STORE
    if opcode == Opcode.LOAD and mem_id in (MemId.INP, MemId.WGT):
        return Module.LOAD
    return Module.COMPUTE
