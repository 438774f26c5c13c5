"""Instruction and micro-op encoding: ISA.md's reference words, round trips, range errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vtakit.errors import IsaError
from vtakit.isa import (
    PRESETS, Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Store, Uop, decode, decode_program,
    decode_uops, encode, encode_program, encode_uops,
)
from vtakit.isa.random_instructions import random_instructions
from vtakit.isa.fields import alu_layout, gemm_layout, mem_layout, uop_layout

PYNQ = HwConfig.preset("pynq")


def test_isa_md_reference_gemm():
    insn = Gemm(uop_bgn=5, uop_end=77, iter_out=3, iter_in=9, dst_factor_out=100, dst_factor_in=7,
                src_factor_out=33, src_factor_in=2, wgt_factor_out=511, wgt_factor_in=1,
                pop_prev=True, push_next=True)
    assert encode(insn, PYNQ).hex() == "4a05a009180012006438400804f05f00"
    assert decode(bytes.fromhex("4a05a009180012006438400804f05f00"), PYNQ) == insn


def test_isa_md_reference_load():
    insn = Load(MemId.INP, sram_base=1234, dram_base=0x89ABC, y_size=7, x_size=14, x_stride=56,
                y_pad_0=1, y_pad_1=2, x_pad_0=3, x_pad_1=15, pop_next=True)
    assert encode(insn, PYNQ).hex() == "104913f06a22000007000e00380021f3"
    assert decode(bytes.fromhex("104913f06a22000007000e00380021f3"), PYNQ) == insn


def test_alu_fields_land_where_isa_md_says():
    word = int.from_bytes(encode(Alu(AluOp.SHR, 0, 1, use_imm=True, imm=-1), PYNQ), "little")
    assert word & 0b111 == 4                      # opcode ALU
    assert (word >> 108) & 0b111 == AluOp.SHR     # alu_opcode after four 11-bit factors
    assert (word >> 111) & 1 == 1                 # use_imm
    assert word >> 112 == 0xFFFF                  # imm, two's complement
    finish = int.from_bytes(encode(Finish(pop_next=True), PYNQ), "little")
    assert finish == 3 | (1 << 4)


@pytest.mark.parametrize("name", list(PRESETS))
def test_random_program_round_trip(name):
    cfg = HwConfig.preset(name)
    insns = random_instructions(cfg, 5000, seed=hash(name) % 1000)
    code = encode_program(insns, cfg)
    assert len(code) == 16 * len(insns)
    assert decode_program(code, cfg) == insns
    # single-instruction path agrees with the vectorised one
    for i in range(0, 5000, 997):
        assert encode(insns[i], cfg) == code[16 * i:16 * i + 16]


def _field_values(layout, names):
    return {n: st.integers(layout[n].min, layout[n].max) for n in names}


_NOT_VALUES = {"opcode", "pop_prev", "pop_next", "push_prev", "push_next", "reset", "use_imm", "alu_opcode"}
_DEPS = {k: st.booleans() for k in ("pop_prev", "pop_next", "push_prev", "push_next")}


@st.composite
def instructions(draw, cfg):
    kind = draw(st.sampled_from(["load", "store", "gemm", "alu", "finish"]))
    if kind in ("load", "store"):
        fields = _field_values(mem_layout(cfg), ["sram_base", "dram_base", "y_size", "x_size", "x_stride",
                                                 "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"])
        cls = Load if kind == "load" else Store
        return draw(st.builds(cls, mem=st.sampled_from(list(MemId)), **fields, **_DEPS))
    if kind == "gemm":
        layout = gemm_layout(cfg)
        fields = _field_values(layout, [n for n in layout.names if n not in _NOT_VALUES])
        return draw(st.builds(Gemm, reset=st.booleans(), **fields, **_DEPS))
    if kind == "alu":
        layout = alu_layout(cfg)
        fields = _field_values(layout, [n for n in layout.names if n not in _NOT_VALUES])
        return draw(st.builds(Alu, op=st.sampled_from(list(AluOp)), reset=st.booleans(),
                              use_imm=st.booleans(), **fields, **_DEPS))
    return draw(st.builds(Finish, **_DEPS))


@pytest.mark.parametrize("name", ["pynq", "1x8", "2x16"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_encodable_instruction_round_trips(name, data):
    cfg = HwConfig.preset(name)
    insn = data.draw(instructions(cfg))
    assert decode(encode(insn, cfg), cfg) == insn


@pytest.mark.parametrize("insn, field", [
    (Gemm(0, 1, iter_out=1 << 14), "iter_out"),
    (Gemm(0, 1, dst_factor_out=2048), "dst_factor_out"),
    (Gemm(8192, 8193), "uop_bgn"),
    (Alu(AluOp.ADD, 0, 1, use_imm=True, imm=1 << 15), "imm"),
    (Alu(AluOp.ADD, 0, 1, use_imm=True, imm=-(1 << 15) - 1), "imm"),
    (Load(MemId.INP, 1 << 16, 0, 1, 1, 1), "sram_base"),
    (Load(MemId.INP, 0, 1 << 32, 1, 1, 1), "dram_base"),
    (Load(MemId.INP, 0, 0, 1, 1, 1, x_pad_1=16), "x_pad_1"),
    (Store(MemId.OUT, 0, 0, -1, 1, 1), "y_size"),
])
def test_out_of_range_fields(insn, field):
    program = [Finish(), Finish(), insn]
    with pytest.raises(IsaError) as e:
        encode_program(program, PYNQ)
    assert e.value.field == field and e.value.insn_index == 2
    assert field in str(e.value) and "instruction 2" in str(e.value)


def test_decode_rejects_unknown_codes():
    word = bytearray(encode(Finish(), PYNQ))
    word[0] = (word[0] & ~0b111) | 6
    with pytest.raises(IsaError, match="unknown opcode 6"):
        decode_program(bytes(16) + bytes(word), PYNQ)
    load = bytearray(encode(Load(MemId.INP, 0, 0, 1, 1, 1), PYNQ))
    load[0] = (load[0] & 0x7F) | 0x80  # mem_id bits 7..9 -> 7
    load[1] |= 0b11
    with pytest.raises(IsaError, match="unknown mem_id 7"):
        decode(bytes(load), PYNQ)
    with pytest.raises(IsaError, match="16 bytes"):
        decode(b"\x00" * 15, PYNQ)


@pytest.mark.parametrize("name", list(PRESETS))
def test_uop_round_trip(name):
    cfg = HwConfig.preset(name)
    layout = uop_layout(cfg)
    rng = np.random.default_rng(1)
    table = np.stack([rng.integers(0, f.max + 1, 200) for f in layout.fields], axis=1)
    data = encode_uops(table, cfg)
    uops = decode_uops(data, cfg)
    assert [(u.dst, u.src, u.wgt) for u in uops] == [tuple(r) for r in table.tolist()]
    assert encode_uops(uops, cfg) == data


def test_uop_bits_pynq():
    word = int.from_bytes(encode_uops([Uop(dst=3, src=5, wgt=7)], PYNQ), "little")
    assert word == 3 | (5 << 11) | (7 << 22)
    with pytest.raises(IsaError, match="wgt"):
        encode_uops([Uop(0, 0, 1024)], PYNQ)
