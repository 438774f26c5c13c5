"""Bad programs end in one clear error naming the instruction, never a hang or an IndexError."""

import numpy as np
import pytest

import vtakit.sim as sim
from vtakit.errors import DeadlockError, DeviceTimeout, SimError
from vtakit.isa import Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Store, Uop, encode
from vtakit.sim.workloads import ConvTile, conv_tiles_program

from tests.support.small_programs import small_image

PYNQ = HwConfig.preset("pynq")
MODELS = ["functional", "cycle"]


def _image(insns, cfg=PYNQ, uops=None):
    return small_image(insns, cfg, uops)


def _raises(img, model, error=SimError):
    with pytest.raises(error) as e:
        sim.run_image(img, model=model)
    return e.value


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("insns, uops, index, field", [
    ([Load(MemId.INP, 2040, 0, 2, 5, 5), Finish()], None, 0, "sram_base"),
    ([Load(MemId.INP, 0, 0, 3, 2, 5, 1, 1, 1, 1), Load(MemId.ACC, 2047, 0, 1, 2, 2), Finish()],
     None, 1, "sram_base"),
    ([Load(MemId.WGT, 0, 1 << 20, 1, 1, 1), Finish()], None, 0, "dram_base"),
    ([Store(MemId.OUT, 0, 1 << 24, 2, 1, 1), Finish()], None, 0, "dram_base"),
    ([Store(MemId.OUT, 2047, 0, 1, 2, 2), Finish()], None, 0, "sram_base"),
    ([Gemm(0, 2, iter_out=3, dst_factor_out=1000), Finish()], [Uop(10, 0, 0), Uop(48, 0, 0)], 1, "uop.dst"),
    ([Gemm(0, 1, iter_in=2, src_factor_in=2047), Finish()], [Uop(0, 1, 0)], 1, "uop.src"),
    ([Gemm(0, 1), Finish()], [Uop(0, 0, 1023)], None, None),
    ([Gemm(0, 1, iter_out=2, wgt_factor_out=1), Finish()], [Uop(0, 0, 1023)], 1, "uop.wgt"),
    ([Alu(AluOp.ADD, 0, 1, iter_in=2, src_factor_in=2000), Finish()], [Uop(0, 100, 0)], 1, "uop.src"),
    ([Gemm(0, 8193), Finish()], None, 0, "uop_end"),
    ([Store(MemId.OUT, 0, 0, 1, 1, 1, y_pad_0=1), Finish()], None, 0, "y_pad_0"),
    ([Store(MemId.INP, 0, 0, 1, 1, 1), Finish()], None, 0, "mem_id"),
    ([Load(MemId.OUT, 0, 0, 1, 1, 1), Finish()], None, 0, "mem_id"),
    ([Load(MemId.INP, 0, 0, 1, 1, 1, pop_prev=True), Finish()], None, 0, "pop_prev"),
    ([Finish(), Store(MemId.OUT, 0, 0, 1, 1, 1, push_next=True)], None, 1, "push_next"),
    ([Alu(AluOp.MUL, 0, 1, use_imm=True, imm=3), Finish()], None, 0, "alu_opcode"),
])
def test_bad_instruction_names_index_and_field(model, insns, uops, index, field):
    img = _image(insns, uops=uops)
    if index is None:  # the in-range control case runs fine
        sim.run_image(img, model=model)
        return
    err = _raises(img, model)
    assert (err.insn_index, err.field) == (index, field)
    assert f"instruction {index}" in str(err) and field in str(err)


@pytest.mark.parametrize("model", MODELS)
def test_unknown_opcode_and_memory_type(model):
    img = _image([Load(MemId.INP, 0, 0, 1, 1, 1), Finish(), Finish()])
    word = bytearray(encode(Finish(), PYNQ))
    word[0] = (word[0] & ~0b111) | 7
    img.dram[img.insn_addr + 16:img.insn_addr + 32] = np.frombuffer(bytes(word), np.uint8)
    err = _raises(img, model)
    assert (err.insn_index, err.field) == (1, "opcode") and "unknown opcode" in str(err)
    img.dram[img.insn_addr + 1] |= 0b11  # mem_id of instruction 0 -> 7
    img.dram[img.insn_addr] |= 0x80
    err = _raises(img, model)
    assert (err.insn_index, err.field) == (0, "mem_id")


@pytest.mark.parametrize("model", MODELS)
def test_deadlock_names_queues_and_instructions(model):
    img = _image([Load(MemId.INP, 0, 0, 1, 1, 1, pop_next=True),
                  Gemm(0, 0, pop_prev=True, push_prev=True),
                  Finish()])
    err = _raises(img, model, DeadlockError)
    assert set(err.stuck) == {"load", "compute"}
    assert "instruction 0 (LOAD.INP)" in err.stuck["load"] and "compute->load" in err.stuck["load"]
    assert "instruction 1 (GEMM)" in err.stuck["compute"] and "load->compute" in err.stuck["compute"]
    assert str(err).startswith("deadlock")
    if model == "cycle":
        assert err.cycle is not None


@pytest.mark.parametrize("model", MODELS)
def test_deadlock_behind_a_full_command_queue(model):
    """The token compute waits for sits behind instructions fetch cannot dispatch."""
    cfg = PYNQ.replace(cmd_queue_depth=2)
    img = _image([Gemm(0, 0, pop_prev=True), Gemm(0, 0), Gemm(0, 0), Gemm(0, 0),
                  Load(MemId.INP, 0, 0, 1, 1, 1, push_next=True), Finish()], cfg=cfg)
    err = _raises(img, model, DeadlockError)
    assert "fetch" in err.stuck and "instruction 3" in err.stuck["fetch"]
    assert "compute command queue is full" in err.stuck["fetch"]
    # With room in the queue the same program runs.
    ok = _image([Gemm(0, 0, pop_prev=True), Gemm(0, 0), Gemm(0, 0), Gemm(0, 0),
                 Load(MemId.INP, 0, 0, 1, 1, 1, push_next=True), Finish()])
    sim.run_image(ok, model=model)


@pytest.mark.parametrize("model", MODELS)
def test_full_token_queue_deadlock(model):
    cfg = PYNQ.replace(token_queue_depth=2)
    pushes = [Load(MemId.INP, 0, 0, 1, 1, 1, push_next=True) for _ in range(3)]
    img = _image(pushes + [Gemm(0, 0, pop_next=True), Finish()], cfg=cfg)
    err = _raises(img, model, DeadlockError)
    assert "full: 2 of 2" in err.stuck["load"] and "store->compute" in err.stuck["compute"]


@pytest.mark.parametrize("model", MODELS)
def test_missing_finish(model):
    err = _raises(_image([Load(MemId.INP, 0, 0, 1, 1, 1)]), model)
    assert "without reaching FINISH" in str(err)
    err = _raises(_image([]), model)
    assert "without reaching FINISH" in str(err)


def test_bad_run_arguments():
    dram = np.zeros(4096, np.uint8)
    with pytest.raises(SimError, match="aligned") as e:
        sim.run(PYNQ, dram, 8, 1)
    assert e.value.field == "insn_addr"
    with pytest.raises(SimError, match="past the end of DRAM"):
        sim.run(PYNQ, dram, 4080, 2)
    with pytest.raises(SimError, match="uint8") as e:
        sim.run(PYNQ, np.zeros(4096, np.int32), 0, 1)
    assert e.value.field == "dram"
    with pytest.raises(SimError, match="unknown model"):
        sim.run(PYNQ, dram, 0, 1, model="fast")


@pytest.mark.parametrize("model", MODELS)
def test_timeout(model):
    img = conv_tiles_program(PYNQ, ConvTile(rows=1, cols=1, cin_blocks=1, cout_blocks=1, kernel=1),
                             tiles=600)
    with pytest.raises(DeviceTimeout, match="exceeded"):
        sim.run_image(img, model=model, timeout_s=1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_timeout_inside_one_huge_instruction(model):
    """2 x 10^12 micro-ops: memory stays bounded and the time limit still holds."""
    img = _image([Gemm(0, 8192, iter_out=16383, iter_in=16383), Finish()])
    with pytest.raises(DeviceTimeout, match="inside one instruction"):
        sim.run_image(img, model=model, timeout_s=0.3)
