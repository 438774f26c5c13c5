"""Runs without a time limit have a budget derived from the program (issue 37, cause 7), and an
instruction left waiting at FINISH is a deadlock (cause 8): on the functional and cycle models.
The RTL and the simulated board are tested in tests/integration/hw/test_rtl_budget.py."""

import numpy as np
import pytest

import vtakit.sim as sim
from vtakit.errors import DeadlockError, DeviceTimeout
from vtakit.isa import Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Store, Uop
from vtakit.isa.image import ProgramBuilder
from vtakit.sim import budget
from vtakit.sim.decoded import decode_for_sim
from vtakit.sim.functional import replay_tokens
from vtakit.sim.workloads import ConvTile, conv_tiles_program

from tests.support.no_hang import no_hang
from tests.support.small_programs import small_image

PYNQ = HwConfig.preset("pynq")
MODELS = ["functional", "cycle"]
MAXIMAL = {"gemm": Gemm(0, 8192, iter_out=16383, iter_in=16383),
           "alu": Alu(AluOp.ADD, 0, 8192, iter_out=16383, iter_in=16383, use_imm=True, imm=1)}


def _prog(img):
    return decode_for_sim(img.config, img.dram, img.insn_addr, img.insn_count)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kind", sorted(MAXIMAL))
def test_maximal_loops_are_refused_before_running(model, kind):
    img = small_image([MAXIMAL[kind], Finish()])
    with no_hang(), pytest.raises(DeviceTimeout) as e:
        sim.run_image(img, model=model)
    text = str(e.value)
    assert "2,198,754,828,290 micro-ops" in text and f"{budget.MAX_WORK:,}" in text
    assert "instruction 0" in text and "--timeout" in text and "\n" not in text


@pytest.mark.parametrize("model", MODELS)
def test_a_time_limit_replaces_the_budget(model):
    img = small_image([Gemm(0, 1, iter_out=40, iter_in=40), Finish()], uops=[Uop(0, 0, 0)])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(budget, "MAX_WORK", 1000)
        with pytest.raises(DeviceTimeout, match="beyond the 1,000"):
            sim.run_image(img, model=model)
        stats, _ = sim.run_image(img, model=model, timeout_s=60)
        assert stats.gemm_uops == 1600
        mp.setattr(budget, "MAX_WORK", 1604)  # 1600 micro-ops, 3 instructions, 1 micro-op loaded
        sim.run_image(img, model=model)


def test_program_work_counts_loops_and_elements():
    img = small_image([Load(MemId.INP, 0, 0, 2, 3, 3, y_pad_0=1, x_pad_1=1),     # (2+1) x (3+1)
                       Gemm(0, 3, iter_out=5, iter_in=7),                      # 105
                       Alu(AluOp.ADD, 0, 2, iter_out=4, use_imm=True, imm=1),  # 8
                       Gemm(0, 0, iter_out=100),                               # no micro-ops
                       Store(MemId.OUT, 0, 0, 2, 2, 2),                        # 4
                       Finish()])
    work = budget.program_work(_prog(img))
    assert work.total == 12 + 105 + 8 + 0 + 4 + 6
    assert (work.heaviest, work.heaviest_work) == (1, 106)


def test_real_layers_stay_far_inside_the_budget():
    """The largest run of `vtakit demo` (ResNet-18) is 0.86 M; a conv layer of tiles here the same."""
    img = conv_tiles_program(PYNQ, ConvTile(rows=8, cols=8, cin_blocks=4, cout_blocks=4, kernel=3), tiles=4)
    prog = _prog(img)
    assert budget.program_work(prog).total * 50 < budget.MAX_WORK
    assert budget.cycle_budget(prog) > 4 * budget.serial_cycles(prog)
    stats, _ = sim.run_image(img, model="cycle")
    assert stats.cycles < budget.serial_cycles(prog)   # the serial estimate bounds a real run


# ------------------------------------------------------------------ deadlock at FINISH
@pytest.mark.parametrize("model", MODELS)
def test_store_left_waiting_at_finish_is_a_deadlock(model):
    img = small_image([Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True), Finish()])
    with pytest.raises(DeadlockError) as e:
        sim.run_image(img, model=model)
    text = str(e.value)
    assert text.startswith("deadlock") and "FINISH (instruction 1)" in text
    assert "instruction 0 (STORE.OUT)" in e.value.stuck["store"] and "compute->store" in text
    assert "never ran" in text and set(e.value.stuck) == {"store"}


@pytest.mark.parametrize("model", MODELS)
def test_load_and_store_left_waiting_at_finish(model):
    img = small_image([Load(MemId.INP, 0, 0, 1, 1, 1, pop_next=True),
                       Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True), Finish()])
    with pytest.raises(DeadlockError) as e:
        sim.run_image(img, model=model)
    assert set(e.value.stuck) == {"load", "store"} and "those instructions never ran" in str(e.value)
    assert "instruction 0 (LOAD.INP)" in e.value.stuck["load"]


@pytest.mark.parametrize("model", MODELS)
def test_instruction_queued_behind_a_blocked_push_at_finish(model):
    """The load module cannot push its second token (the queue holds one) and nobody pops:
    the LOAD behind it never runs."""
    cfg = PYNQ.replace(token_queue_depth=1)
    img = small_image([Load(MemId.INP, 0, 0, 1, 1, 1, push_next=True),
                       Load(MemId.INP, 0, 0, 1, 1, 1, push_next=True),
                       Load(MemId.INP, 1, 0, 1, 1, 1), Finish()], cfg=cfg)
    with pytest.raises(DeadlockError) as e:
        sim.run_image(img, model=model)
    assert "after instruction 1 (LOAD.INP) to push" in e.value.stuck["load"]


def _store_after_compute(finish_waits: bool):
    """ALU writes the output buffer, pushes to store; STORE writes DRAM; FINISH waits for it or
    not.  A long STORE before it (after the loads, so that they have the memory port) keeps
    the store module busy past FINISH."""
    b = ProgramBuilder(PYNQ)
    acc = b.place_elems(MemId.ACC, np.arange(32, dtype=np.int32).reshape(2, 1, 16))
    out = b.reserve_elems(MemId.OUT, 2, name="out", shape=(2, 16), dtype="|i1")
    scratch = b.reserve_elems(MemId.OUT, 512)
    uop = b.place_uops([Uop(0), Uop(1)])
    b.emit(Load(MemId.ACC, 0, acc, 1, 2, 2), Load(MemId.UOP, 0, uop, 1, 2, 2, push_next=True),
           Store(MemId.OUT, 0, scratch, 1, 512, 512, pop_prev=True),
           Alu(AluOp.ADD, 0, 2, use_imm=True, imm=1, push_next=True),
           Store(MemId.OUT, 0, out, 1, 2, 2, pop_prev=True, push_prev=finish_waits),
           Finish(pop_next=finish_waits))
    return b.build()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("finish_waits", [True, False])
def test_store_not_ordered_before_finish_still_runs(model, finish_waits):
    """A STORE that only timing puts after FINISH is no deadlock, and its output is written
    (the cycle model used to stop at FINISH and leave it out)."""
    img = _store_after_compute(finish_waits)
    _, dram = sim.run_image(img, model=model)
    assert (img.read("out", dram) == np.arange(32).reshape(2, 16) + 1).all()


def test_tokens_left_to_push_at_finish_are_no_deadlock():
    """The STORE ran; only its token stays unpushed (the queue is full): nothing is missing."""
    cfg = PYNQ.replace(token_queue_depth=1)
    img = small_image([Gemm(0, 0, push_next=True), Gemm(0, 0, push_next=True),
                       Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True, push_prev=True),
                       Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True, push_prev=True), Finish()], cfg=cfg)
    for model in MODELS:
        sim.run_image(img, model=model)
    assert replay_tokens(_prog(img), [0, 0, 0, 0]) == [0, 0, 0, 1]


def test_replay_tokens_starts_from_the_tokens_left_before():
    img = small_image([Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True), Finish()])
    prog = _prog(img)
    assert replay_tokens(prog, [0, 0, 1, 0]) == [0, 0, 0, 0]
    with pytest.raises(DeadlockError, match="FINISH"):
        replay_tokens(prog, [0, 0, 0, 0])


def test_sim_device_runs_again_after_a_deadlock_at_finish():
    img = small_image([Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True), Finish()])
    dev = sim.SimDevice(PYNQ, model="cycle", dram_bytes=img.dram.size)
    dev.dram[:] = img.dram
    with pytest.raises(DeadlockError):
        dev.run(img.insn_addr, img.insn_count)
    ok = small_image([Finish()])
    dev.dram[:ok.dram.size] = ok.dram
    assert dev.run(ok.insn_addr, ok.insn_count).insns == 1
