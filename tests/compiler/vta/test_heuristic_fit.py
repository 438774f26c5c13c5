"""The default heuristic learns from the tuner: with `heuristics.FIT` (fit by benchmarks/fit_heuristic.py to the
cycle model and the shipped tuning log) its knobs for ResNet-18's layers run within 5 % of the tuner's best
knobs, and C2-C11 reach 90 % of peak untuned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vtakit.compiler.backends.vta.heuristics import FIT, CostFit, default_conv_knobs
from vtakit.compiler.backends.vta.layers import RESNET18
from vtakit.isa import HwConfig
from vtakit.scheduling.measure import measure_conv
from vtakit.scheduling.task import task_from_layer

PYNQ = HwConfig.preset("pynq")
LOG = Path(__file__).parents[3] / "benchmarks" / "tuned_resnet18_pynq.jsonl"
TUNED = {r["task"]: r["schedule"] for r in map(json.loads, LOG.read_text().splitlines())}
LAYERS = {layer.name: layer for layer in RESNET18}


def _default_and_tuned(name: str, fit: CostFit = FIT) -> tuple[int, int]:
    task = task_from_layer(LAYERS[name], PYNQ)
    default = measure_conv(task, default_conv_knobs(PYNQ, task.shape, None, fit).to_dict())
    tuned = measure_conv(task, TUNED[name])
    assert default.ok and tuned.ok, (default.error, tuned.error)
    return default.cycles, tuned.cycles


@pytest.mark.parametrize("name", ["C4", "C7", "C10"])
def test_default_knobs_within_5_percent_of_tuned_on_1x1_layers(name: str) -> None:
    default, tuned = _default_and_tuned(name)
    assert default <= 1.05 * tuned, (name, default, tuned)


def test_fit_beats_the_unfit_model_on_the_stride_2_1x1_layer() -> None:
    """C4: the unfit model takes reduction steps of one block, whose loads outlast their GEMM (8 % slower)."""
    fitted, _ = _default_and_tuned("C4")
    unfit, _ = _default_and_tuned("C4", CostFit())
    assert fitted < 0.95 * unfit


@pytest.mark.slow
def test_default_knobs_reach_90_percent_on_c2_c11() -> None:
    total = {"default": 0, "tuned": 0}
    macs = 0
    for name in (f"C{i}" for i in range(2, 12)):
        default, tuned = _default_and_tuned(name)
        assert default <= 1.05 * tuned, (name, default, tuned)
        reps = LAYERS[name].repeats
        total["default"] += default * reps
        total["tuned"] += tuned * reps
        macs += LAYERS[name].macs * reps
    assert macs / (total["default"] * PYNQ.peak_macs_per_cycle) >= 0.90
