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
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from vtakit.errors import CompileError
from vtakit.isa.insn import Finish, Insn
from vtakit.isa.opcodes import Module

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


def insert_tokens(records: list[Record]) -> list[Record]:
    """Set the dependency flags of every record and append FINISH; returns the new list."""
    last_writer: dict[Slot, int] = {}
    readers: dict[Slot, dict[Module, int]] = {}
    synced: dict[tuple[Module, Module], int] = {}
    out = list(records)
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
    return [replace(r, insn=replace(r.insn, **r.flags)) if r.flags else r for r in out]
