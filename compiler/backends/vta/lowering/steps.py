"""The lowering steps' registry: the hooks `codegen` runs around and inside its walk of a loop nest.

`codegen._Lowering` walks the scheduled loop nest's statements once.  The walk itself emits each
statement (DMA transfers, int8 moves, bias GEMMs, tensorized compute and epilogues, fused pools: `WALK`),
and runs the registered steps at three points, each phase's steps in `order`:

  BEFORE  once, before the walk: `run(lowering) -> None`; checks the operator or sets state the walk
          reads (`tensorize.match`, `capacity.allocate`, which sets `lowering.alloc`).
  CALL    on every intrinsic call the walk emits, before its loops are folded into micro-ops:
          `run(lowering, call) -> call` (an `IntrinsicCall`, changed or not).
  AFTER   once, on the whole stream: `run(lowering, records) -> records` (`uops.preload` puts every
          micro-op kernel in one load at the start; `tokens.insert_tokens` sets the dependency tokens).

`lowering` is the walk's state (`LoweringState`).  A step is one module in this folder that ends with
`register_step(LoweringStep(...))`, plus its name in the import line of `lowering/__init__.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable, Protocol

from vtakit.compiler.backends.vta.loopnest import LoopNest, Stmt
from vtakit.compiler.backends.vta.te import ComputeDef
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig


class Phase(IntEnum):
    """Where in `codegen`'s walk a step runs (module docstring)."""
    BEFORE = 1
    CALL = 2
    AFTER = 3


class LoweringState(Protocol):
    """What a step may read (and a BEFORE step set) on `codegen._Lowering`."""
    nest: LoopNest
    cfg: HwConfig
    compute: ComputeDef
    stmts: list[Stmt]  # the walk's statements, in program order
    alloc: Any  # capacity.Allocation, once `capacity.allocate` ran
    uops: Any  # uops.UopCache: the micro-op kernels placed so far


@dataclass(frozen=True)
class LoweringStep:
    """One registered lowering step: its phase, its function (the phase's signature) and its place."""
    name: str
    phase: Phase
    run: Callable[..., Any]
    order: int = 0  # within the phase, lower first
    doc: str = ""  # one line: what it does


STEPS: dict[str, LoweringStep] = {}
"""Every registered step by name, in registration order."""

WALK: tuple[tuple[str, str], ...] = (
    ("dma.plan_transfers", "per load/store statement: 2-D DMA transfers with padding, and min-fills"),
    ("move.moved_calls / added_call", "per int8 load into acc without LOAD.ACC8: INP load, GEMM reset and "
                                      "identity GEMM; an added operand: one identity GEMM into the output tile"),
    ("bias.bias_call", "per bias ADD whose digits sit in WGT: one GEMM of the `ones` INP entry into the tile"),
    ("tensorize.compute_call / tile_calls", "per compute and epilogue statement: intrinsic calls over a tile"),
    ("pool.pool_calls / post_calls", "per output tile of a conv with a fused max pool: ALU passes pooling the "
                                      "tile on chip (halo rows carried between tiles), the epilogue's monotone "
                                      "tail on the pooled tile, the pooled rows' store"),
    ("uops.fold + UopCache", "per call, after the CALL steps: loops folded into GEMM/ALU iterations, micro-op "
                             "kernels kept resident"),
)
"""What the walk itself does per statement, in order (the statements' own lowering, not hooks)."""


def register_step(step: LoweringStep) -> LoweringStep:
    """Add `step`; a name taken by another step is an error."""
    known = STEPS.get(step.name)
    if known is not None and known != step:
        raise CompileError(f"lowering step {step.name!r} is registered already")
    if not isinstance(step.phase, Phase):
        raise CompileError(f"lowering step {step.name!r}: phase must be a Phase, got {step.phase!r}")
    STEPS[step.name] = step
    return step


def unregister_step(name: str) -> None:
    """Take a step back (tests register toy steps)."""
    STEPS.pop(name, None)


def steps(phase: Phase) -> list[LoweringStep]:
    """The steps of `phase` in the order they run (`order`, then registration)."""
    return sorted((s for s in STEPS.values() if s.phase is phase), key=lambda s: s.order)


def lowering_steps() -> list[tuple[str, str]]:
    """(step, what it does) in the order lowering runs them: the BEFORE steps, the walk (the CALL steps
    inside it, before the folding), the AFTER steps."""
    listed = [(f"{s.name} (before the walk)", s.doc) for s in steps(Phase.BEFORE)]
    listed += list(WALK[:-1]) + [(f"{s.name} (per call)", s.doc) for s in steps(Phase.CALL)] + [WALK[-1]]
    return listed + [(f"{s.name} (after the walk)", s.doc) for s in steps(Phase.AFTER)]
