"""The RTL and the simulated PYNQ board: a run without a time limit has a budget derived from the
program, and an instruction left waiting at FINISH is a deadlock (issue 37, causes 7 and 8).
Uses the cached Verilator build of pynq that the other RTL tests use."""

import numpy as np
import pytest

import vtakit.hw.device as rtl_device
import vtakit.sim as sim
from vtakit.errors import BudgetExceeded, DeadlockError
from vtakit.fpga.selftest import run_image
from vtakit.fpga.simboard import simulated_pynq
from vtakit.hw.device import RtlDevice
from vtakit.isa import Alu, AluOp, Finish, Gemm, HwConfig, MemId, Store, Uop
from vtakit.sim import budget

from tests.support.no_hang import no_hang
from tests.support.small_programs import small_image

PYNQ = HwConfig.preset("pynq")
STORE_LEFT_WAITING = [Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True), Finish()]


def _device(img) -> RtlDevice:
    dram = np.zeros(1 << 20, np.uint8)
    dram[:img.dram.size] = img.dram
    return RtlDevice(PYNQ, dram=dram)


def _load(dev, img, addr: int = 1 << 19) -> int:
    """Copy `img`'s instructions to `addr` of the device's DRAM (its data stays where the first
    image put it); returns the address."""
    dev.dram[addr:addr + img.insn_count * 16] = np.frombuffer(img.insn_bytes(), np.uint8)
    return addr


def test_store_left_waiting_at_finish_is_a_deadlock_and_the_device_recovers():
    img = small_image(STORE_LEFT_WAITING)
    dev = _device(img)
    with pytest.raises(DeadlockError) as e:
        dev.run(img.insn_addr, img.insn_count)
    text = str(e.value)
    assert "FINISH (instruction 1)" in text and "instruction 0 (STORE.OUT)" in e.value.stuck["store"]
    ok = small_image([Finish()])
    assert dev.run(_load(dev, ok), ok.insn_count).cycles > 0   # the waiting STORE is gone


def test_tokens_left_by_an_earlier_run_count():
    """The first run leaves a compute->store token; the second run's STORE takes it (on the
    design and in the token replay), so it is no deadlock."""
    first = small_image([Gemm(0, 0, push_next=True), Finish()])
    dev = _device(first)
    dev.run(first.insn_addr, first.insn_count)
    second = small_image(STORE_LEFT_WAITING)
    dev.run(_load(dev, second), second.insn_count)
    with pytest.raises(DeadlockError):          # now the queue is empty again
        dev.run(_load(dev, second), second.insn_count)


@pytest.mark.parametrize("insn", [Gemm(0, 8192, iter_out=16383, iter_in=16383),
                                  Alu(AluOp.ADD, 0, 8192, iter_out=16383, iter_in=16383, use_imm=True, imm=1)])
def test_maximal_loops_are_refused_before_a_cycle_runs(insn):
    img = small_image([insn, Finish()])
    with no_hang(), pytest.raises(BudgetExceeded) as e:
        sim.run_image(img, model="rtl")
    assert "RTL" in str(e.value) and f"{budget.MAX_WORK:,}" in str(e.value) and "--timeout" in str(e.value)


def test_cycle_budget_stops_the_design_and_a_time_limit_replaces_it(monkeypatch):
    img = small_image([Gemm(0, 1, iter_out=200, iter_in=200), Finish()], uops=[Uop(0, 0, 0)])
    monkeypatch.setattr(rtl_device, "cycle_budget", lambda prog: 20_000)
    with pytest.raises(BudgetExceeded) as e:   # derived from the program: a tuner may log it as a result
        sim.run_image(img, model="rtl")
    assert "cycle budget of 20,000" in str(e.value) and "--timeout" in str(e.value)
    stats, _ = sim.run_image(img, model="rtl", timeout_s=120)
    assert stats.cycles > 40_000


def test_default_cycle_budget_leaves_room():
    img = small_image([Gemm(0, 1, iter_out=100, iter_in=100), Finish()], uops=[Uop(0, 0, 0)])
    stats, _ = sim.run_image(img, model="rtl")
    prog = sim.decoded.decode_for_sim(img.config, img.dram, img.insn_addr, img.insn_count)
    assert stats.cycles <= budget.serial_cycles(prog) < budget.cycle_budget(prog)


def test_simulated_board_reports_the_store_left_waiting():
    dev = simulated_pynq(PYNQ)
    with pytest.raises(DeadlockError, match=r"FINISH \(instruction 1\)"):
        run_image(dev, small_image(STORE_LEFT_WAITING))
    downloads = dev.pynq_device.counters["downloads"]
    assert run_image(dev, small_image([Finish()])).cycles > 0   # reprogrammed, working again
    assert dev.pynq_device.counters["downloads"] == downloads + 1
