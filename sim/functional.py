"""Functional model: ISA semantics and dependency tokens, no time.

The three modules form a Kahn network with bounded queues: fetch dispatches in
program order into command queues of `cmd_queue_depth`; a module takes its next
instruction as soon as it is free, waits for the tokens it pops, executes, then
waits for room to push its tokens (queues hold `token_queue_depth`).  Whether
such a network deadlocks does not depend on the schedule, so this model and the
cycle model give the same verdict.  Among the modules that can go, the one whose
instruction comes first in program order runs next.

FINISH is the last instruction, so when it runs every other module is blocked for
good: an instruction still waiting then never runs, and that is a deadlock too (its
output would be silently missing).  `replay_tokens` runs the same network without
data, for devices that need the verdict without the work (the RTL, the board).
"""

from __future__ import annotations

import time
from collections import deque

from vtakit.errors import DeviceTimeout, SimError
from vtakit.isa.opcodes import Module, Opcode
from vtakit.sim.decoded import DecodedProgram
from vtakit.sim.machine import Machine
from vtakit.sim.stats import Counters
from vtakit.sim.stuck import deadlock_error
from vtakit.sim.trace import TraceRecorder

_MODULES = (Module.LOAD, Module.COMPUTE, Module.STORE)


def run_functional(prog: DecodedProgram, machine: "Machine | TokenMachine", counters: Counters,
                   trace: TraceRecorder | None = None, timeout_s: float | None = None) -> None:
    cfg = prog.cfg
    qdepth, tdepth = cfg.cmd_queue_depth, cfg.token_queue_depth
    module = prog.module.tolist()
    opcode = prog.opcode.tolist()
    pops, pushes = prog.pops, prog.pushes
    tokens = machine.tokens
    queues = [deque(), deque(), deque()]
    current: list[int | None] = [None, None, None]   # taken, waiting for its pops
    pushing: list[list[int]] = [[], [], []]          # executed, tokens still to push
    pushing_idx: list[int | None] = [None, None, None]
    fetched = 0
    step = 0
    deadline = time.monotonic() + timeout_s if timeout_s else None

    while True:
        progress = False
        # Fetch dispatches in order while the target queue has room.
        while fetched < prog.n and len(queues[module[fetched]]) < qdepth:
            queues[module[fetched]].append(fetched)
            fetched += 1
            progress = True
        for m in _MODULES:
            rest = pushing[m]
            while rest and tokens[rest[0]] < tdepth:
                tokens[rest.pop(0)] += 1
                progress = True
            if not rest:
                pushing_idx[m] = None
            if current[m] is None and not rest and queues[m]:
                current[m] = queues[m].popleft()
                progress = True
        # The ready module with the earliest instruction executes it.
        best = None
        for m in _MODULES:
            i = current[m]
            if i is not None and all(tokens[q] > 0 for q in pops[i]):
                if best is None or i < current[best]:
                    best = m
        if best is not None:
            i = current[best]
            for q in pops[i]:
                tokens[q] -= 1
            machine.execute(prog, i, counters)
            if trace is not None:
                trace.span(Module(best).label, prog.mnemonic(i), step, step + 1, insn=i)
            step += 1
            current[best] = None
            if opcode[i] == Opcode.FINISH:
                stuck = _stuck(prog, current, queues, pushing, pushing_idx, tokens, fetched, at_finish=True)
                if stuck:  # nothing can move any more: what still waits never runs
                    raise deadlock_error(prog, stuck, tokens, cycle=None, finish=i)
                return
            pushing[best] = list(pushes[i])
            pushing_idx[best] = i
            progress = True
            if deadline is not None and step % 1024 == 0 and time.monotonic() > deadline:
                raise DeviceTimeout(f"functional simulation exceeded {timeout_s} s at instruction {i}")
        if not progress:
            break

    if fetched == prog.n and all(c is None for c in current) and not any(queues) \
            and not any(pushing):
        raise SimError(f"all {prog.n} instructions ran without reaching FINISH", field="insn_count")
    raise deadlock_error(prog, _stuck(prog, current, queues, pushing, pushing_idx, tokens, fetched),
                         tokens, cycle=None)


def _stuck(prog: DecodedProgram, current: list, queues: list, pushing: list, pushing_idx: list,
           tokens: list[int], fetched: int, at_finish: bool = False) -> dict[str, tuple]:
    """What each blocked module waits for (deadlock_error's `stuck`).  At FINISH a module whose
    last instruction ran and that has nothing queued is done, even with a token left to push."""
    stuck = {}
    for m in _MODULES:
        if pushing[m] and (queues[m] or not at_finish):
            stuck[m.label] = ("push", pushing_idx[m], pushing[m][0])
        elif current[m] is not None:
            i = current[m]
            waiting = next(q for q in prog.pops[i] if tokens[q] == 0)
            stuck[m.label] = ("pop", i, waiting)
    if fetched < prog.n:
        stuck["fetch"] = ("dispatch", fetched, int(prog.module[fetched]))
    return stuck


class TokenMachine:
    """Stands in for a Machine when only the token flow matters: it keeps the four token
    counts and skips the data (the flow does not depend on data)."""

    def __init__(self, tokens: list[int]):
        self.tokens = list(tokens)

    def execute(self, prog: DecodedProgram, i: int, counters: Counters) -> None:
        counters.insns += 1


def replay_tokens(prog: DecodedProgram, tokens: list[int]) -> list[int]:
    """Run the token flow of `prog` from `tokens` (those left by earlier runs) without data:
    the tokens left at FINISH, or the DeadlockError the program ends in on any device."""
    machine = TokenMachine(tokens)
    run_functional(prog, machine, Counters())
    return machine.tokens
