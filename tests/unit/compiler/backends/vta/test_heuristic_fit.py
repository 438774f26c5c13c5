"""The default heuristic learns from the tuner: with `heuristics.FIT` (fit by benchmarks/fit_heuristic.py to the
cycle model and the shipped tuning log) its knobs for ResNet-18's layers run within 5 % of the tuner's best
knobs (C2-C11 reaching 90 % of peak untuned: tests/integration/compiler/backends/vta/test_heuristic_fit.py)."""

from __future__ import annotations

import pytest

from vtakit.compiler.backends.vta.heuristics import CostFit

from tests.support.tuned_layers import default_and_tuned


@pytest.mark.parametrize("name", ["C4", "C7", "C10"])
def test_default_knobs_within_5_percent_of_tuned_on_1x1_layers(name: str) -> None:
    default, tuned = default_and_tuned(name)
    assert default <= 1.05 * tuned, (name, default, tuned)


def test_fit_beats_the_unfit_model_on_the_stride_2_1x1_layer() -> None:
    """C4: the unfit model takes reduction steps of one block, whose loads outlast their GEMM (8 % slower)."""
    fitted, _ = default_and_tuned("C4")
    unfit, _ = default_and_tuned("C4", CostFit())
    assert fitted < 0.95 * unfit
