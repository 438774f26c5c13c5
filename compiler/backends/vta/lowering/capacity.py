"""Capacity check and on-chip buffer allocation.

Every cached tensor gets one tile-sized slot per copy (one per virtual thread
when its transfer sits inside the virtual-thread loop, else one) in its scope;
the slot is as large as the largest tile that lands there.  If a scope
overflows, the CompileError lists who needs what, so the fix (smaller tiles,
fewer threads) is plain.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.loopnest import LoopNest, Stmt
from vtakit.compiler.backends.vta.lowering.bias import ONES
from vtakit.compiler.backends.vta.lowering.move import IDENTITY, direct_operands, moved_tensors, stage_name
from vtakit.compiler.backends.vta.lowering.pool import POOL_OUT, pool_footprints
from vtakit.compiler.backends.vta.lowering.steps import LoweringState, LoweringStep, Phase, register_step
from vtakit.compiler.backends.vta.regions import region_of
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId

SCOPE_DEPTH = {"inp": "inp_depth", "wgt": "wgt_depth", "acc": "acc_depth"}


@dataclass(frozen=True)
class Allocation:
    footprint: dict[str, int]
    """Entries of the largest tile of each tensor."""
    copies: dict[str, int]
    base: dict[tuple[str, int], int]
    """(tensor, copy) -> first entry of its slot."""
    used: dict[str, int]
    """Entries used per scope."""

    def slot(self, tensor: str, thread: int) -> int:
        return self.base[(tensor, thread if self.copies[tensor] > 1 else 0)]


def allocate(nest: LoopNest, cfg: HwConfig, stmts: list[Stmt]) -> Allocation:
    compute = nest.compute
    accesses = {a.tensor.name: a for a in compute.accesses()}
    footprint: dict[str, int] = {}
    out_tiles = []
    for s in stmts:
        if s.kind in ("load", "out_begin"):
            box = nest.box(s.values, nest.placement[s.tensor])
            region = region_of(accesses[s.tensor], box)
            footprint[s.tensor] = max(footprint.get(s.tensor, 0), region.size)
            if s.kind == "out_begin":
                out_tiles.append(region)
    copies = {t: nest.vthreads if nest.per_thread(t) else 1 for t in footprint}
    scopes = dict(nest.scopes)
    out = compute.out.tensor.name
    init = compute.init.tensor.name if compute.init is not None else None
    moved, direct = moved_tensors(compute, cfg), direct_operands(compute, cfg)
    for t in moved:  # an INP staging slot per moved tile, and the identity block once (lowering.move)
        owner = out if t == init else t
        footprint[stage_name(t)], copies[stage_name(t)] = footprint[owner], copies[owner]
        scopes[stage_name(t)] = "inp"
    for t in direct:  # added to the output tile by the identity GEMM straight from INP
        scopes[t] = "inp"
    if moved or direct:
        footprint[IDENTITY], copies[IDENTITY], scopes[IDENTITY] = 1, 1, "wgt"
    if compute.pool is not None:  # the fused pool's scratch, pooled tile (per thread) and carry (lowering.pool)
        for t, size in pool_footprints(compute, out_tiles).items():
            footprint[t], copies[t], scopes[t] = size, copies[out] if t == POOL_OUT else 1, "acc"
    if any(s.operand is not None and s.operand.tensor.mem == MemId.WGT for s in compute.steps):
        footprint[ONES], copies[ONES], scopes[ONES] = 1, 1, "inp"   # the bias GEMM's input (lowering.bias)
    base, used = {}, {}
    for t in sorted(footprint):
        scope = scopes[t]
        for c in range(copies[t]):
            base[(t, c)] = used.get(scope, 0)
            used[scope] = used.get(scope, 0) + footprint[t]
    if compute.init is not None:  # the init tensor is read straight into the output tile
        copies[compute.init.tensor.name] = copies[out]
        for c in range(copies[out]):
            base[(compute.init.tensor.name, c)] = base[(out, c)]
    for scope, n in used.items():
        depth = getattr(cfg, SCOPE_DEPTH[scope])
        if n > depth:
            parts = [f"{t} {copies[t]} x {footprint[t]}" for t in sorted(footprint)
                     if scopes[t] == scope]
            raise CompileError(f"{scope} buffer overflows: {' + '.join(parts)} = {n} entries, "
                               f"it holds {depth} (config {cfg.label}); use smaller tiles or fewer "
                               f"virtual threads", op=compute.name)
    return Allocation(footprint, copies, base, used)


def allocate_step(lowering: LoweringState) -> None:
    """BEFORE the walk: the on-chip slots the walk addresses (`lowering.alloc`)."""
    lowering.alloc = allocate(lowering.nest, lowering.cfg, lowering.stmts)


register_step(LoweringStep("capacity.allocate", Phase.BEFORE, allocate_step, order=20,
                           doc="on-chip buffer slots for every tensor and virtual thread, checked against sizes"))
