"""vtakit.isa: the configuration object, the instruction set and its encoding.

The floor every other layer stands on: `HwConfig` describes an accelerator,
the dataclasses in `insn` describe instructions, `encode`/`decode` turn them into
the 128-bit words of ISA.md, and `asm`/`disasm` into text.
"""

from vtakit.isa.config import DEFAULT_PRESET, PRESETS, HwConfig
from vtakit.isa.encoding import (
    decode, decode_program, decode_uops, encode, encode_program, encode_uops,
)
from vtakit.isa.insn import Alu, Finish, Gemm, Insn, Load, Store, Uop
from vtakit.isa.fields import INSN_BYTES
from vtakit.isa.opcodes import AluOp, MemId, Module, Opcode

__all__ = [
    "HwConfig", "DEFAULT_PRESET", "PRESETS", "Insn", "Load", "Store", "Gemm", "Alu", "Finish", "Uop",
    "Opcode", "MemId", "AluOp", "Module", "INSN_BYTES",
    "encode", "decode", "encode_program", "decode_program", "encode_uops", "decode_uops",
]
