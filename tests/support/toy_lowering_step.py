"""A lowering step as a newcomer adds one: this module, and its name in the import line of
compiler/backends/vta/lowering/__init__.py (the registry's test imports it instead, and takes it back after).

Instruction budget: an operator whose stream is longer than MAX_INSNS is refused at compile time.  Runs
once after the walk, after the token step, on the whole record list; it changes nothing it accepts.
docs/extending.md shows the same module.
"""

from __future__ import annotations

from vtakit.compiler.backends.vta.lowering.steps import LoweringState, LoweringStep, Phase, register_step
from vtakit.compiler.backends.vta.lowering.tokens import Record
from vtakit.errors import CompileError

MAX_INSNS = 1 << 20


def check_budget(lowering: LoweringState, records: list[Record]) -> list[Record]:
    """`records` unchanged, or one CompileError naming the operator and its instruction count."""
    if len(records) > MAX_INSNS:
        raise CompileError(f"{len(records):,} instructions, over the budget of {MAX_INSNS:,}; use larger tiles",
                           op=lowering.compute.name)
    return records


STEP = register_step(LoweringStep("budget.check_budget", Phase.AFTER, check_budget, order=200,
                                  doc="an operator longer than the instruction budget is refused"))
