"""ResNet-18's layers on pynq under the default heuristic and under the shipped tuning log
(benchmarks/tuned_resnet18_pynq.jsonl): the cycle counts the heuristic-fit tests compare."""

from __future__ import annotations

import json
from pathlib import Path

from vtakit.compiler.backends.vta.heuristics import FIT, CostFit, default_conv_knobs
from vtakit.compiler.backends.vta.layers import RESNET18
from vtakit.isa import HwConfig
from vtakit.scheduling.measure import measure_conv
from vtakit.scheduling.task import task_from_layer

PYNQ = HwConfig.preset("pynq")
LOG = Path(__file__).resolve().parents[2] / "benchmarks" / "tuned_resnet18_pynq.jsonl"
TUNED = {r["task"]: r["schedule"] for r in map(json.loads, LOG.read_text().splitlines())}
LAYERS = {layer.name: layer for layer in RESNET18}


def default_and_tuned(name: str, fit: CostFit = FIT) -> tuple[int, int]:
    """Cycles of layer `name` with the heuristic's knobs (under `fit`) and with the logged best knobs."""
    task = task_from_layer(LAYERS[name], PYNQ)
    default = measure_conv(task, default_conv_knobs(PYNQ, task.shape, None, fit).to_dict())
    tuned = measure_conv(task, TUNED[name])
    assert default.ok and tuned.ok, (default.error, tuned.error)
    return default.cycles, tuned.cycles
