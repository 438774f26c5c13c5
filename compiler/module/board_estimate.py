"""The host part's time on the board's own processor, estimated from operation counts.

The host tasks run on the board's ARM core (a PYNQ-Z1's Cortex-A9), not on the PC that measured them, and
no board is attached here.  So the report states an estimate beside the measured figure: per host node,
the larger of its multiply-accumulates at the core's matrix rate and its bytes at the core's memory rate,
plus its transcendental elements and one interpreter dispatch, at the rates `hw.boards.HostCpu` states."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.errors import ConfigError
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.module.macs import node_macs
from vtakit.hw.boards import HostCpu, board_for
from vtakit.isa.config import HwConfig

TRANSCENDENTAL = frozenset({"Exp", "Erf", "Gelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Silu", "Swish",
                            "Mish", "Softplus", "Elu", "Selu", "Log", "Pow", "Sqrt"})
"""Ops whose every output element costs a transcendental function evaluation."""


@dataclass(frozen=True)
class BoardHostEstimate:
    board: str
    cpu: HostCpu
    ms: float

    def line(self) -> str:
        c = self.cpu
        return (f"host on the {self.board}'s {c.name} ({c.mhz:g} MHz), estimated: {self.ms:.1f} ms "
                f"(an estimate from operation counts at {c.gmacs:g} GMAC/s, {c.gbytes:g} GB/s, "
                f"{c.transcendental_ns:g} ns per exp/erf, {c.call_us:g} us per node)")


def _bytes(g: Graph, names: list[str]) -> int:
    return sum(g.tensors[t].size * np.dtype(g.tensors[t].dtype).itemsize for t in names if t and t in g.tensors)


def node_seconds(g: Graph, n: Node, cpu: HostCpu) -> float:
    """One host node's estimated time on `cpu`."""
    moved = _bytes(g, [i for i in n.inputs if i not in g.consts]) + _bytes(g, n.outputs[:1])
    seconds = max(node_macs(g, n) / (cpu.gmacs * 1e9), moved / (cpu.gbytes * 1e9))
    if n.op in TRANSCENDENTAL and n.outputs and n.outputs[0] in g.tensors:
        seconds += g.tensors[n.outputs[0]].size * cpu.transcendental_ns * 1e-9
    return seconds + cpu.call_us * 1e-6


def estimate(g: Graph, cfg: HwConfig, host_nodes: list[str]) -> BoardHostEstimate | None:
    """The host nodes' estimated time on the board built for `cfg` (None: no board preset has this config)."""
    try:
        board = board_for(cfg)
    except ConfigError:
        return None
    nodes = {n.name: n for n in g.nodes}
    seconds = sum(node_seconds(g, nodes[name], board.host_cpu) for name in host_nodes if name in nodes)
    return BoardHostEstimate(board.title, board.host_cpu, seconds * 1e3)
