"""Dependency-token insertion between the load, compute and store modules.

Each instruction lists the on-chip slots it reads and writes.  Walking the
program in order, an instruction that touches a slot last written (RAW, WAW) or
read (WAR) by another module must wait for that instruction: the producer
pushes a token toward it, it pops one.  Tokens only travel between neighbours
(load <-> compute <-> store); a dependency that is already implied (the
consumer waited for a later instruction of the same module before) gets no new
token, so producers are waited for in increasing order and the FIFO token
queues match every pop to the right push.  FINISH waits for the last
instruction of the load and store modules.  Every token pushed is popped.

Queues are bounded.  All dependencies point backwards in program order, so the
first unfinished instruction can always be dispatched, pop its tokens and run;
it can only block on a push into a full queue.  That cannot happen while the
tokens in flight in program order (pushed so far minus popped so far) stay
within the queue depth in every direction, which is checked: a program that
would break it is a CompileError, not a deadlock on the device.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from vtakit.errors import CompileError
from vtakit.isa.insn import Finish, Insn
from vtakit.isa.opcodes import Module
from vtakit.compiler.backends.vta.lowering.steps import LoweringState, LoweringStep, Phase, register_step

Slot = tuple[str, int]


@dataclass
class Record:
    insn: Insn
    reads: frozenset[Slot] = frozenset()
    writes: frozenset[Slot] = frozenset()
    reloc: str | None = None
    """Tensor whose DRAM base the instruction's dram_base is relative to."""
    flags: dict[str, bool] = field(default_factory=dict)

    @property
    def module(self) -> Module:
        return self.insn.module


def insert_tokens(records: list[Record], queue_depth: int | None = None) -> list[Record]:
    """Set the dependency flags of every record and append FINISH; returns the new list.

    With `queue_depth` (the configuration's token_queue_depth) the result is checked
    to be deadlock-free on queues of that depth."""
    last_writer: dict[Slot, int] = {}
    readers: dict[Slot, dict[Module, int]] = {}
    synced: dict[tuple[Module, Module], int] = {}
    out = [Record(r.insn, r.reads, r.writes, r.reloc) for r in records]  # fresh flags
    out.append(Record(Finish()))
    last_of = {Module.LOAD: -1, Module.STORE: -1}

    for i, rec in enumerate(out):
        b = rec.module
        producers = [last_writer[s] for s in rec.reads | rec.writes if s in last_writer]
        producers += [j for s in rec.writes for j in readers.get(s, {}).values()]
        if i == len(out) - 1:  # FINISH: everything else has completed
            producers += [j for j in last_of.values() if j >= 0]
        need: dict[Module, int] = {}
        for j in producers:
            a = out[j].module
            if a != b:
                need[a] = max(need.get(a, -1), j)
        for a, j in need.items():
            if abs(int(a) - int(b)) != 1:
                raise CompileError(f"instruction {i} ({rec.insn.mnemonic}) depends on the {a.label} "
                                   f"module, which is not its neighbour")
            if j <= synced.get((a, b), -1):
                continue
            synced[(a, b)] = j
            toward_next = int(b) > int(a)
            out[j].flags["push_next" if toward_next else "push_prev"] = True
            rec.flags["pop_prev" if toward_next else "pop_next"] = True
        for slot in rec.writes:
            last_writer[slot] = i
            readers[slot] = {}
        for slot in rec.reads:
            readers.setdefault(slot, {})[b] = i
        if b in last_of:
            last_of[b] = i
    if queue_depth is not None:
        _check_in_flight(out, queue_depth)
    return [replace(r, insn=replace(r.insn, **r.flags)) if r.flags else r for r in out]


def _check_in_flight(records: list[Record], depth: int) -> None:
    """CompileError if the tokens in flight in program order exceed a queue's depth."""
    in_flight: dict[tuple[int, int], int] = {}
    for i, rec in enumerate(records):
        m = int(rec.module)
        for flag, other in (("pop_prev", m - 1), ("pop_next", m + 1)):
            if rec.flags.get(flag):
                in_flight[(other, m)] -= 1
        for flag, other in (("push_prev", m - 1), ("push_next", m + 1)):
            if rec.flags.get(flag):
                key = (m, other)
                in_flight[key] = in_flight.get(key, 0) + 1
                if in_flight[key] > depth:
                    raise CompileError(
                        f"instruction {i} ({rec.insn.mnemonic}) would have {in_flight[key]} tokens in flight "
                        f"from the {Module(m).label} to the {Module(other).label} module, more than the "
                        f"{depth} the queue holds: the program could deadlock")


def tokens_step(lowering: LoweringState, records: list[Record]) -> list[Record]:
    """AFTER the walk, last: the dependency tokens (and FINISH) for the configuration's token queues."""
    return insert_tokens(records, lowering.cfg.token_queue_depth)


register_step(LoweringStep("tokens.insert_tokens", Phase.AFTER, tokens_step, order=100,
                           doc="dependency tokens between load, compute and store, then FINISH"))
