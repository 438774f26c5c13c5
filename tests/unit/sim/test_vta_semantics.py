"""VTA's own semantics on the `pynq` preset, where they differ from vtakit's extensions.

Each expected value follows the rule in VTA's HLS design (apache/tvm-vta,
hardware/xilinx/src/vta.cc), not vtakit's simulators: STORE reads an output
buffer that only GEMM and ALU write (a reset GEMM included), SHR reads the low
log2(acc_bits) bits of its operand as a signed amount, and the instructions VTA
runs differently from what they ask for (WGT padding, ACC_8BIT loads, ALU reset,
anything after FINISH) are rejected with SimError naming the instruction and field.
"""

from __future__ import annotations

import numpy as np
import pytest

import vtakit.sim as sim
from tests.support.reference import reference_image
from tests.support.semantics_helpers import MODELS, Prog, check, identity_wgt, rand_acc, rand_i8, to_int8, wrap32
from vtakit.errors import SimError
from vtakit.isa import Alu, AluOp, Gemm, HwConfig, Load, MemId, Uop
from vtakit.isa.encoding import encode_program

PYNQ = HwConfig.preset("pynq")


@pytest.mark.parametrize("model", MODELS)
def test_store_reads_the_output_buffer_not_a_later_acc_load(model: str) -> None:
    """A LOAD.ACC after the ALU leaves the output buffer as the ALU wrote it; entries no
    GEMM or ALU ever wrote store as zero."""
    rng = np.random.default_rng(170)
    p = Prog(PYNQ)
    first = rand_acc(rng, p.acc_shape(4), -10**6, 10**6)
    later = rand_acc(rng, p.acc_shape(6))
    p.load(MemId.ACC, 0, first)
    p.load_uops(0, [Uop(0)])
    p.compute.append(Alu(AluOp.ADD, 0, 1, iter_in=4, dst_factor_in=1, use_imm=True, imm=300))
    p.load(MemId.ACC, 0, later)  # acc[0:6] changes, the output buffer does not
    p.store_out(0, 6, "out")

    expected = np.zeros(p.acc_shape(6), dtype=np.int8)
    expected[:4] = to_int8(first + 300)
    check(p, model, {"out": expected})


@pytest.mark.parametrize("model", MODELS)
def test_reset_gemm_writes_the_sum_to_the_output_buffer(model: str) -> None:
    """VTA's reset GEMM zeroes the accumulator but writes (acc + inp x wgt^T)'s low bits to
    the output buffer; a repeated destination reads the zero the earlier micro-op left."""
    rng = np.random.default_rng(171)
    p = Prog(PYNQ)
    inp = rand_i8(rng, p.inp_shape(3))
    acc0 = rand_acc(rng, p.acc_shape(3), -10**5, 10**5)
    p.load(MemId.INP, 0, inp)
    p.load(MemId.WGT, 0, identity_wgt(PYNQ))
    p.load(MemId.ACC, 0, acc0)
    # uops: dst 0 <- inp 0; dst 1 <- inp 1, then dst 1 again <- inp 2
    p.load_uops(0, [Uop(0, 0, 0), Uop(1, 1, 0), Uop(1, 2, 0)])
    p.compute.append(Gemm(0, 3, reset=True))
    p.store_out(0, 3, "out")

    expected = np.zeros(p.acc_shape(3), dtype=np.int8)
    expected[0] = to_int8(acc0[0] + inp[0])
    expected[1] = to_int8(inp[2])        # the first micro-op left acc[1] = 0
    expected[2] = 0                      # never computed
    check(p, model, {"out": expected})


@pytest.mark.parametrize("model", MODELS)
def test_shr_amount_is_five_bits_signed(model: str) -> None:
    """pynq's SHR amount is the operand's low 5 bits, signed: 16 shifts left by 16, 33 right by 1."""
    rng = np.random.default_rng(172)
    p = Prog(PYNQ)
    x = rand_acc(rng, p.acc_shape(3), -2**14, 2**14)
    p.load(MemId.ACC, 0, x)
    p.load_uops(0, [Uop(0), Uop(1), Uop(2)])
    p.compute += [Alu(AluOp.SHR, 0, 1, use_imm=True, imm=16),   # x << 16
                  Alu(AluOp.SHR, 0, 1, use_imm=True, imm=8),
                  Alu(AluOp.SHR, 0, 1, use_imm=True, imm=8),    # back to x
                  Alu(AluOp.SHR, 1, 2, use_imm=True, imm=33),   # x >> 1
                  Alu(AluOp.SHR, 2, 3, use_imm=True, imm=-4),   # x << 4
                  Alu(AluOp.SHR, 2, 3, use_imm=True, imm=15)]   # >> 15
    p.store_out(0, 3, "out")

    expected = to_int8(np.stack([x[0], x[1] >> 1, wrap32(x[2] << 4) >> 15]))
    check(p, model, {"out": expected})


def _rejected(insns_before: list, bad, after: list, uops: list[Uop] | None = None):
    """A pynq program with `bad` in the compute stream; returns (image, bad's index)."""
    p = Prog(PYNQ)
    p.load(MemId.ACC, 0, np.ones(p.acc_shape(2)))
    if uops:
        p.load_uops(0, uops)
    p.compute += insns_before
    index = len(p.compute)  # loads and uops are compute instructions here; no load module
    p.compute.append(bad)
    p.compute += after
    p.store_out(0, 1, "out")
    return p.build(), index


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("bad, field, uops", [
    (Load(MemId.ACC_8BIT, 0, 0, 1, 1, 1), "mem_id", None),
    (Alu(AluOp.ADD, 0, 1, use_imm=True, imm=1, reset=True), "reset", [Uop(0)]),
])
def test_extensions_pynq_lacks_are_rejected(model: str, bad, field: str, uops) -> None:
    img, index = _rejected([], bad, [], uops)
    with pytest.raises(SimError) as info:
        sim.run_image(img, model=model)
    assert (info.value.insn_index, info.value.field) == (index, field)
    with pytest.raises(SimError):
        reference_image(img)


@pytest.mark.parametrize("model", MODELS)
def test_wgt_padding_rejected(model: str) -> None:
    """VTA's load module ignores a WGT load's padding: pynq refuses it, naming the field."""
    p = Prog(PYNQ)
    p.loads.append(Load(MemId.WGT, 0, p.place(MemId.WGT, identity_wgt(PYNQ)), 1, 1, 1, x_pad_1=2))
    p.load(MemId.ACC, 0, np.ones(p.acc_shape(1)))
    p.store_out(0, 1, "out")
    img = p.build()
    with pytest.raises(SimError) as info:
        sim.run_image(img, model=model)
    assert (info.value.insn_index, info.value.field) == (0, "x_pad_1")
    with pytest.raises(SimError):
        reference_image(img)


@pytest.mark.parametrize("model", MODELS)
def test_instructions_after_finish_rejected(model: str) -> None:
    """On VTA a compute instruction after FINISH clears `done` again: never allowed."""
    p = Prog(PYNQ)
    p.load(MemId.ACC, 0, np.ones(p.acc_shape(1)))
    p.store_out(0, 1, "out")
    img = p.build()
    code = img.dram[img.insn_addr:img.insn_addr + 16 * img.insn_count]
    tail = np.frombuffer(encode_program([Gemm(0, 0)], PYNQ), np.uint8)
    at = img.dram.size + (-img.dram.size) % 16
    dram = np.concatenate([img.dram, np.zeros(at - img.dram.size, np.uint8), code, tail])
    with pytest.raises(SimError) as info:
        sim.run(PYNQ, dram, at, img.insn_count + 1, model=model)
    assert (info.value.insn_index, info.value.field) == (img.insn_count, "opcode")
