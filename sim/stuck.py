"""Turning a stuck simulation into one readable DeadlockError."""

from __future__ import annotations

from vtakit.errors import DeadlockError
from vtakit.isa.opcodes import Module
from vtakit.sim.decoded import QUEUE_NAMES, DecodedProgram


def deadlock_error(prog: DecodedProgram, stuck: dict[str, tuple], tokens: list[int],
                   cycle: int | None, finish: int | None = None) -> DeadlockError:
    """`stuck` maps a module to (kind, instruction index, queue or module) with kind in
    pop / push / dispatch; `finish` is the index of a FINISH that ran while they waited
    (what waits then never runs: its output would be silently missing)."""
    described: dict[str, str] = {}
    for name in ("fetch", "load", "compute", "store"):
        if name not in stuck:
            continue
        kind, i, what = stuck[name]
        insn = f"instruction {i} ({prog.mnemonic(i)})"
        if kind == "pop":
            described[name] = f"waits at {insn} to pop a token from {QUEUE_NAMES[what]} (empty)"
        elif kind == "push":
            described[name] = (f"waits after {insn} to push a token into {QUEUE_NAMES[what]} "
                               f"(full: {tokens[what]} of {prog.cfg.token_queue_depth})")
        else:
            described[name] = (f"cannot dispatch {insn}: the {Module(what).label} command queue is "
                               f"full ({prog.cfg.cmd_queue_depth})")
    when = f" at cycle {cycle}" if cycle is not None else ""
    body = "; ".join(f"{k} {v}" for k, v in described.items())
    if finish is not None:
        what = "that instruction" if len(described) == 1 else "those instructions"
        body = (f"FINISH (instruction {finish}) ran while {body}; {what} never ran "
                f"(make FINISH wait for {'it' if len(described) == 1 else 'them'} with a token)")
    return DeadlockError(f"deadlock{when}: {body}", stuck=described, cycle=cycle)
