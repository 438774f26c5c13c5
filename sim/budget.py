"""Run budgets: how much a program may ask of a device when no time limit is given.

A program's work is known before it runs: the micro-ops of its GEMM and ALU loops
(iter_out x iter_in x micro-op range, summed) plus the elements its LOADs and STOREs
move.  Two instructions with maximal loop counts ask for ~2 x 10^12 micro-ops, hours
on any device, so a run without a time limit is refused before it starts when its
work is beyond `MAX_WORK`; a time limit (`timeout_s`, `--timeout`) replaces the
budget.  Devices that clock a design (the RTL) also get a cycle budget derived from
the program, so a design that runs far past what the program asks is stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.errors import BudgetExceeded
from vtakit.isa.fields import INSN_BYTES
from vtakit.isa.opcodes import Opcode
from vtakit.sim.decoded import DecodedProgram
from vtakit.sim.cost_rules import static_costs

MAX_WORK = 1 << 24
"""Default work per run without a time limit (~17 M micro-ops and elements: about a minute at the
cycle model's slowest, ALU micro-ops with long inner loops at 0.25 M/s; 57 M of those ran past
300 s).  `vtakit demo` (ResNet-18 on pynq) makes 21 runs, the largest 0.86 M, 8.8 M in all."""

CYCLE_FACTOR = 4
CYCLE_SLACK = 1_000_000
"""Cycle budget = CYCLE_FACTOR x the program's serial cycle estimate + CYCLE_SLACK: the
estimate adds up every instruction's duration as if nothing overlapped, so a design that
needs more than four times that is stuck, not slow."""

HOW_TO_RAISE = "give the run a time limit instead (--timeout SECONDS; timeout_s= in Python)"


@dataclass(frozen=True)
class Work:
    """A program's work before it runs."""

    total: int
    heaviest: int
    """Index of the instruction with the most work."""
    heaviest_work: int


def program_work(prog: DecodedProgram) -> Work:
    """Micro-ops of every GEMM/ALU loop plus elements of every LOAD/STORE, one per instruction."""
    if prog.n == 0:
        return Work(0, 0, 0)
    op, mem, loop = prog.opcode, prog.mem, prog.gemm
    is_loop = (op == Opcode.GEMM) | (op == Opcode.ALU)
    uops = loop["iter_out"] * loop["iter_in"] * np.maximum(loop["uop_end"] - loop["uop_bgn"], 0)
    rows = mem["y_size"] + mem["y_pad_0"] + mem["y_pad_1"]
    cols = mem["x_size"] + mem["x_pad_0"] + mem["x_pad_1"]
    moved = np.where(mem["x_size"] > 0, rows * cols, 0)
    is_mem = (op == Opcode.LOAD) | (op == Opcode.STORE)
    per_insn = 1 + np.where(is_loop, uops, 0) + np.where(is_mem, moved, 0)
    heaviest = int(np.argmax(per_insn))
    # a Python sum: millions of maximal instructions would overflow int64
    return Work(sum(per_insn.tolist()), heaviest, int(per_insn[heaviest]))


def check_work(prog: DecodedProgram, timeout_s: float | None, device: str,
               max_work: int | None = None) -> None:
    """BudgetExceeded (a DeviceTimeout that every rerun repeats) before a run without a time limit
    whose work is beyond `max_work` (default MAX_WORK)."""
    if timeout_s is not None:
        return
    max_work = MAX_WORK if max_work is None else max_work
    work = program_work(prog)
    if work.total <= max_work:
        return
    i = work.heaviest
    raise BudgetExceeded(
        f"{device}: program of {prog.n} instructions asks for {work.total:,} micro-ops and DMA elements "
        f"(instruction {i}, {prog.mnemonic(i)}, alone {work.heaviest_work:,}), beyond the {max_work:,} "
        f"a run without a time limit may take; {HOW_TO_RAISE}")


def serial_cycles(prog: DecodedProgram) -> int:
    """Cycles the program takes if no two instructions overlapped (the cycle model's durations
    plus fetching every instruction with a full memory latency): an upper bound of a correct run."""
    cfg = prog.cfg
    duration, _ = static_costs(cfg, prog.opcode, prog.mem, prog.gemm, prog.alu["use_imm"])
    fetch = prog.n * (cfg.mem_latency + -(-INSN_BYTES // cfg.bus_bytes) + 1)
    return sum(duration.tolist()) + fetch


def cycle_budget(prog: DecodedProgram) -> int:
    """Cycles a design may run this program before it is stopped (see CYCLE_FACTOR)."""
    return CYCLE_FACTOR * serial_cycles(prog) + CYCLE_SLACK
