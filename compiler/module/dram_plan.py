"""Static DRAM planning: one arena per module, constants first, activations reusing space.

Every buffer the accelerator touches gets a fixed offset at compile time, so a
module's instructions are linked once when it is loaded on a device and each run
only writes inputs and reads outputs.  Activation buffers whose lifetimes (in
task order) do not overlap share addresses: greedy first fit, largest first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vtakit.compiler.ir import Graph
from vtakit.compiler.passes.lower import VtaTask
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId
from vtakit.isa.arith import round_up


def alignment(cfg: HwConfig) -> int:
    """An alignment that suits every memory type's element size (DRAM addresses count elements) and
    starts every buffer on a burst boundary (a run from an unaligned start costs one more burst: fc's
    weight rows, 252 of them, paid ~6 k cycles for it)."""
    a = max(64, cfg.burst_bytes)
    while any(a % cfg.elem_bytes(m) for m in MemId):
        a *= 2
    return a


@dataclass
class DramPlan:
    slots: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (offset, bytes)
    const_bytes: int = 0
    arena_bytes: int = 0
    activation_bytes_without_reuse: int = 0

    def to_dict(self) -> dict:
        return dict(slots={k: list(v) for k, v in self.slots.items()}, const_bytes=self.const_bytes,
                    arena_bytes=self.arena_bytes,
                    activation_bytes_without_reuse=self.activation_bytes_without_reuse)

    @classmethod
    def from_dict(cls, d: dict) -> "DramPlan":
        return cls({k: tuple(v) for k, v in d["slots"].items()}, d["const_bytes"], d["arena_bytes"],
                   d["activation_bytes_without_reuse"])


_STRETCH = 64
"""Tasks per stretch of the lifetime index: a buffer is looked for only among those alive in the
stretches its own lifetime spans, not among every buffer placed (quadratic in a long network)."""


def _stretches(first: int, last: int) -> range:
    return range(min(first, last) // _STRETCH, max(first, last) // _STRETCH + 1)


def _overlapping(placed: list[tuple[int, int, int, int]], alive: dict[int, list[int]],
                 first: int, last: int) -> list[tuple[int, int, int, int]]:
    """The placed (offset, bytes, first, last) whose lifetimes overlap [first, last], by offset."""
    near = {i for stretch in _stretches(first, last) for i in alive.get(stretch, ())}
    return sorted(b for b in (placed[i] for i in near) if not (b[2] > last or b[3] < first))


def plan_dram(cfg: HwConfig, fixed: dict[str, int], activations: dict[str, tuple[int, int, int]]) -> DramPlan:
    """`fixed`: constant buffers (key -> bytes), alive for the module's life; `activations`: key ->
    (bytes, first task index, last task index), alive over that closed interval."""
    a = alignment(cfg)
    plan = DramPlan()
    top = 0
    for key, size in fixed.items():
        plan.slots[key] = (top, size)
        top = round_up(top + size, a)
    plan.const_bytes = top
    placed: list[tuple[int, int, int, int]] = []  # offset, bytes, first, last
    alive: dict[int, list[int]] = {}  # stretch of _STRETCH tasks -> the placed buffers alive in it
    for key, (size, first, last) in sorted(activations.items(), key=lambda kv: (-kv[1][0], kv[0])):
        offset = 0
        for o, s, f, l in _overlapping(placed, alive, first, last):
            if offset + size <= o:
                break
            offset = max(offset, round_up(o + s, a))
        for stretch in _stretches(first, last):
            alive.setdefault(stretch, []).append(len(placed))
        placed.append((offset, size, first, last))
        plan.slots[key] = (plan.const_bytes + offset, size)
    act_top = max((o + s for o, s, _, _ in placed), default=0)
    plan.arena_bytes = round_up(plan.const_bytes + act_top, 4096)
    plan.activation_bytes_without_reuse = sum(round_up(s, a) for s, _, _ in activations.values())
    return plan


def liveness(cfg: HwConfig, tasks: list, graph: Graph) -> dict[str, tuple[int, int, int]]:
    """Activation buffer key -> (bytes, first task, last task) from the task order."""
    spans: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    produced: dict[str, str] = {}  # tensor -> key of the buffer its accelerator producer writes
    readers = graph.consumers()
    index = {t.node if isinstance(t, VtaTask) else t: i for i, t in enumerate(tasks)}

    def touch(key: str, i: int) -> None:
        span = spans.setdefault(key, [i, i])
        span[0], span[1] = min(span[0], i), max(span[1], i)

    for i, t in enumerate(tasks):
        if not isinstance(t, VtaTask):
            continue
        for name, buf in t.acts.items():
            sizes[buf.key] = max(sizes.get(buf.key, 0), t.program.tensors[name].nbytes(cfg))
            touch(buf.key, i)
        produced[t.output.tensor] = t.output.key
    for tensor, key in produced.items():  # the host (or a relayout) reads accelerator results from DRAM
        for reader in readers.get(tensor, []):
            touch(key, index[reader.name])
        if tensor in graph.outputs:
            touch(key, len(tasks))
    return {k: (sizes[k], s[0], s[1]) for k, s in spans.items()}
