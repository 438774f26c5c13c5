"""The default heuristic picks the schedules it picked before its search was vectorised (issue 43): every
shape the zoo networks ask about and ResNet-18's C1-C11 on every preset, as recorded from the brute-force
search by tests/support/schedule_table.py; and the vectorised cost of every candidate is `conv_cost`'s
double, to the bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vtakit.compiler.backends.vta.heuristics import FIT, candidate_costs, conv_cost, conv_shape, default_conv_knobs
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from tests.support.schedule_table import NETWORKS, TABLE, case_of, choice

ROWS = json.loads(TABLE.read_text())


def test_the_table_covers_the_zoo_and_the_benchmark_layers():
    where = {r["where"] for r in ROWS}
    assert where == set(NETWORKS) | {"C1-C11"}
    assert len({r["config"] for r in ROWS if r["where"] == "C1-C11"}) == len(HwConfig.preset_names())
    assert len(ROWS) >= 390


def test_every_recorded_choice_is_still_chosen():
    changed = [(r["where"], r["shape"], r["vthreads"], got, r["choice"]) for r in ROWS
               if (got := choice(*case_of(r))) != r["choice"]]
    assert not changed, f"{len(changed)} of {len(ROWS)} schedules changed, first: {changed[0]}"


@pytest.mark.parametrize("index", range(0, len(ROWS), 40))
def test_vectorised_costs_are_conv_costs_to_the_bit(index):
    cfg, shape, vthreads, fit = case_of(ROWS[index])
    knobs, costs = candidate_costs(cfg, shape, vthreads, fit)
    assert len(knobs) == len(costs) > 0
    for k, cost in zip(knobs, costs):
        expected = conv_cost(cfg, shape, k, fit)
        assert (cost == np.inf) if expected is None else (cost == expected), (k, expected, cost)
    best = int(np.argmin(costs))
    if costs[best] < np.inf:
        assert default_conv_knobs(cfg, shape, vthreads, fit) == knobs[best]


def test_shapes_that_fit_nowhere_are_one_error():
    cfg = HwConfig.preset("pynq")
    huge = conv_shape(cfg, n=1, c_in=16, h=40, w=40, c_out=16, kh=33, kw=33, stride=1, pad=0,
                      epilogue_ops=3, planes=1)   # one 33x33 kernel block outgrows the weight buffer
    with pytest.raises(CompileError, match="no tiling of this convolution fits"):
        default_conv_knobs(cfg, huge)
    small = conv_shape(cfg, n=1, c_in=16, h=2, w=2, c_out=16, kh=1, kw=1, stride=1, pad=0, epilogue_ops=1, planes=1)
    with pytest.raises(CompileError, match="4 virtual threads need as many tiles"):
        default_conv_knobs(cfg, small, 4, FIT)
