"""The default heuristic over all of ResNet-18's C2-C11 (the 1x1 layers and the fit itself:
tests/unit/compiler/backends/vta/test_heuristic_fit.py): within 5 % of the tuner's best knobs on each,
90 % of peak untuned in all."""

from __future__ import annotations

import pytest

from tests.support.tuned_layers import LAYERS, PYNQ, default_and_tuned


@pytest.mark.slow
def test_default_knobs_reach_90_percent_on_c2_c11() -> None:
    total = {"default": 0, "tuned": 0}
    macs = 0
    for name in (f"C{i}" for i in range(2, 12)):
        default, tuned = default_and_tuned(name)
        assert default <= 1.05 * tuned, (name, default, tuned)
        reps = LAYERS[name].repeats
        total["default"] += default * reps
        total["tuned"] += tuned * reps
        macs += LAYERS[name].macs * reps
    assert macs / (total["default"] * PYNQ.peak_macs_per_cycle) >= 0.90
