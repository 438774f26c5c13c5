"""The lowering steps' registry (compiler/backends/vta/lowering/steps.py): codegen runs the registered steps
before its walk, on every intrinsic call and after it, so a step is one module that registers itself.  A
toy step (tests/support/toy_lowering_step.py) registered by importing it runs on every operator with no
edit to codegen; taken back, it is gone."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops
from vtakit.compiler.backends.vta.lowering import IntrinsicCall, LoweringStep, Phase, lowering_steps, register_step, steps, unregister_step
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig

TOY = "tests.support.toy_lowering_step"
PYNQ = HwConfig.preset("pynq")


@pytest.fixture
def budget():
    """The toy step's module, freshly imported (that registers it); unregistered afterwards."""
    sys.modules.pop(TOY, None)
    module = importlib.import_module(TOY)
    try:
        yield module
    finally:
        unregister_step("budget.check_budget")
        sys.modules.pop(TOY, None)


def _conv():
    op, _ = ops.compile_conv2d(PYNQ, x_shape=(1, 64, 14, 14), w_shape=(64, 64, 3, 3), padding=1, shift=8,
                               clip=(0, 127))
    return op


def test_the_built_in_steps_run_in_their_order():
    assert [s.name for s in steps(Phase.BEFORE)] == ["tensorize.match", "capacity.allocate"]
    assert [s.name for s in steps(Phase.AFTER)] == ["uops.preload", "tokens.insert_tokens"]
    assert steps(Phase.CALL) == []
    names = [name for name, _ in lowering_steps()]
    assert names[:2] == ["tensorize.match (before the walk)", "capacity.allocate (before the walk)"]
    assert names[-2:] == ["uops.preload (after the walk)", "tokens.insert_tokens (after the walk)"]


def test_a_registered_step_runs_on_every_operator(budget, monkeypatch):
    unregister_step("budget.check_budget")
    plain = _conv()  # without the budget
    register_step(budget.STEP)
    assert "budget.check_budget (after the walk)" == lowering_steps()[-1][0]
    seen = []  # a spy after the budget: what the AFTER steps hand on
    register_step(LoweringStep("budget.spy", Phase.AFTER, lambda low, records: seen.append(len(records)) or records,
                               order=300))
    try:
        op = _conv()
    finally:
        unregister_step("budget.spy")
    assert seen == [len(op.insns)]  # after the tokens: FINISH included
    assert np.array_equal(op.program().words, plain.program().words)  # the budget accepts and changes nothing
    monkeypatch.setattr(budget, "MAX_INSNS", 50)
    with pytest.raises(CompileError, match=r"conv2d: \d+ instructions, over the budget of 50; use larger tiles"):
        _conv()


def test_a_call_step_sees_every_intrinsic_call_before_folding():
    calls: list[IntrinsicCall] = []
    register_step(LoweringStep("toy.calls", Phase.CALL, lambda low, call: calls.append(call) or call))
    try:
        op = _conv()
    finally:
        unregister_step("toy.calls")
    gemm_alu = sum(type(i).__name__ in ("Gemm", "Alu") for i in op.insns)
    assert len(calls) == gemm_alu and {c.kind for c in calls} >= {"gemm", "reset", "alu"}
    assert steps(Phase.CALL) == []


def test_taken_back_it_is_gone(budget):
    unregister_step("budget.check_budget")
    budget.MAX_INSNS = 1
    _conv()  # no longer refused
    assert not any(name.startswith("budget.") for name, _ in lowering_steps())


def test_a_taken_name_is_one_error(budget):
    with pytest.raises(CompileError, match="'budget.check_budget' is registered already"):
        register_step(LoweringStep("budget.check_budget", Phase.BEFORE, budget.check_budget))
