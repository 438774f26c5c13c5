"""The host part's time on the board's ARM core, estimated from operation counts at stated rates."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.module.board_estimate import estimate, node_seconds
from vtakit.hw.boards import BOARDS, PS_CPU, ZYNQ
from vtakit.isa.config import HwConfig


def _graph() -> Graph:
    t = {"x": TensorInfo((64, 256), "float32"), "w": TensorInfo((128, 256), "float32"),
         "y": TensorInfo((64, 128), "float32"), "z": TensorInfo((64, 128), "float32")}
    nodes = [Node("Dense", "fc", ["x", "w"], ["y"]), Node("Softmax", "softmax", ["y"], ["z"], dict(axis=-1))]
    return Graph(nodes, t, ["x"], ["z"], {"w": np.zeros((128, 256), np.float32)})


def test_a_node_costs_its_macs_or_its_bytes_plus_transcendentals_and_a_dispatch():
    g, a9 = _graph(), PS_CPU[ZYNQ]
    fc, softmax = g.nodes
    macs, moved = 64 * 256 * 128, (64 * 256 + 64 * 128) * 4   # the weights are constants: not moved per run
    assert node_seconds(g, fc, a9) == pytest.approx(max(macs / 0.5e9, moved / 0.6e9) + 40e-6)
    assert node_seconds(g, softmax, a9) == pytest.approx(2 * 64 * 128 * 4 / 0.6e9 + 64 * 128 * 40e-9 + 40e-6)


def test_the_estimate_names_the_board_built_for_the_config_and_its_core():
    g = _graph()
    pynq = estimate(g, HwConfig.preset("pynq"), ["fc", "softmax"])
    ultra = estimate(g, BOARDS["ultra96-v2"].config, ["fc", "softmax"])
    assert pynq is not None and ultra is not None and pynq.board == "PYNQ-Z1" and ultra.cpu.name == "Cortex-A53"
    assert ultra.ms < pynq.ms and "estimate" in pynq.line()
    assert estimate(g, HwConfig.preset("pynq"), []).ms == 0.0
