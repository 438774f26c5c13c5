"""Assembler and disassembler: listings read back to the same program."""

import pytest

from vtakit.errors import IsaError
from vtakit.isa import PRESETS, Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Store
from vtakit.isa.asm import asm, disasm
from vtakit.isa.random_instructions import random_instructions
from vtakit.isa.encoding import encode_program

PYNQ = HwConfig.preset("pynq")


@pytest.mark.parametrize("name", list(PRESETS))
def test_round_trip_random_programs(name):
    cfg = HwConfig.preset(name)
    program = random_instructions(cfg, 2000, seed=7)
    text = disasm(program, cfg)
    assert asm(text, cfg) == program
    # and from the binary form
    assert asm(disasm(encode_program(program, cfg), cfg), cfg) == program


def test_listing_reads_like_a_listing():
    program = [
        Load(MemId.INP, 1234, 0x89ABC, 7, 14, 56, 1, 2, 3, 15, pop_next=True),
        Gemm(5, 77, 3, 9, 100, 7, 33, 2, 511, 1, pop_prev=True, push_next=True),
        Alu(AluOp.SHR, 0, 4, use_imm=True, imm=-3),
        Alu(AluOp.MAX, 0, 4, 2, 1, 1, 0, 5, 0),
        Store(MemId.OUT, 0, 16, 2, 8, 16, push_prev=True),
        Finish(pop_next=True),
    ]
    lines = disasm(program, PYNQ).splitlines()
    assert lines[0].startswith("; vtakit listing")
    assert lines[1].split()[:3] == ["0", "load", "LOAD.INP"]
    assert "sram=1234 dram=0x89abc y=7 x=14 stride=56 pad=1,2,3,15" in lines[1]
    assert lines[1].endswith("pop=next")
    assert lines[2].split()[1:3] == ["compute", "GEMM"]
    assert "uop=5:77 iter=3x9 dst=100,7 src=33,2 wgt=511,1" in lines[2]
    assert lines[2].endswith("pop=prev push=next")
    assert "imm=-3" in lines[3]
    assert "imm" not in lines[4]
    assert lines[5].split()[1:3] == ["store", "STORE.OUT"]
    assert asm("\n".join(lines), PYNQ) == program


def test_hand_written_source():
    source = """
    ; comments and blank lines are fine
    LOAD.WGT sram=0 dram=0x10 y=1 x=4 stride=4   push=next   # no index or module column
    compute GEMM uop=0:8 reset=1
    ALU.ADD uop=0:8 iter=2x1 dst=8,0 src=8,0
    ALU.MIN uop=0:8 imm=127 push=next
    STORE.OUT sram=0 dram=0 y=1 x=8 stride=8 pop=prev push=prev
    FINISH pop=next
    """
    program = asm(source, PYNQ)
    assert program[0] == Load(MemId.WGT, 0, 16, 1, 4, 4, push_next=True)
    assert program[1] == Gemm(0, 8, reset=True)
    assert program[2] == Alu(AluOp.ADD, 0, 8, iter_out=2, dst_factor_out=8, src_factor_out=8)
    assert program[3] == Alu(AluOp.MIN, 0, 8, use_imm=True, imm=127, push_next=True)
    assert program[5] == Finish(pop_next=True)


def test_unused_immediate_survives():
    insn = Alu(AluOp.ADD, 0, 1, use_imm=False, imm=42)
    assert asm(disasm([insn], PYNQ), PYNQ) == [insn]


@pytest.mark.parametrize("line, message", [
    ("FOO", "unknown mnemonic"),
    ("LOAD.XYZ sram=0 dram=0 y=1 x=1 stride=1", "unknown memory type"),
    ("LOAD.INP sram=0 dram=0 y=1 x=1", "missing field 'stride'"),
    ("LOAD.INP sram=0 dram=0 y=1 x=1 stride=1 color=3", "unknown field 'color'"),
    ("GEMM uop=0-3", "uop= takes 2 values"),
    ("GEMM uop=0:x", "not an integer"),
    ("ALU.DIV uop=0:1", "unknown ALU operation"),
    ("FINISH pop=left", "prev and/or next"),
    ("store LOAD.INP sram=0 dram=0 y=1 x=1 stride=1", "runs on the load module"),
])
def test_errors_name_the_line(line, message):
    with pytest.raises(IsaError, match=message) as e:
        asm("FINISH\n" + line, PYNQ)
    assert e.value.line == 2 and "line 2" in str(e.value)
