"""Where a compiled network's multiply-accumulates go: per node, and the share the accelerator takes.

Only matrix work counts (convolutions, dense layers, matrix products, float or quantized): it is what the
GEMM core executes; element-wise ops, pooling and normalisation are bandwidth, not MACs.  Counted on the
compiled graph, so a product the compiler rewrote (a rank-3 MatMul as a Dense over its rows) counts once,
where it runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vtakit.compiler.ir import Graph, Node

_CONVS = ("Conv", "QConv")
_PRODUCTS = ("Dense", "QDense", "Gemm", "MatMul", "ActDense", "QActDense")


def node_macs(g: Graph, n: Node) -> int:
    """Multiply-accumulates of one node of `g` (0 for what is not matrix work)."""
    if not n.outputs or n.outputs[0] not in g.tensors:
        return 0
    out = g.tensors[n.outputs[0]].shape
    if n.op in _CONVS and len(n.inputs) > 1 and n.inputs[1] in g.tensors:
        return math.prod(out) * math.prod(g.tensors[n.inputs[1]].shape[1:])
    if n.op == "ConvTranspose" and len(n.inputs) > 1:
        return math.prod(g.tensors[n.inputs[0]].shape) * math.prod(g.tensors[n.inputs[1]].shape[1:])
    if n.op in _PRODUCTS and n.inputs and n.inputs[0] in g.tensors:
        x = g.tensors[n.inputs[0]].shape
        inner = x[0] if n.op == "Gemm" and n.attrs.get("transA") else x[-1] if x else 1
        return math.prod(out) * inner
    return 0


@dataclass(frozen=True)
class MacSplit:
    accelerator: int
    host: int

    @property
    def total(self) -> int:
        return self.accelerator + self.host

    @property
    def accelerator_share(self) -> float:
        return self.accelerator / self.total if self.total else 0.0

    def line(self) -> str:
        """One line for the compile summary."""
        if not self.total:
            return "no matrix work (convolutions, dense layers, matrix products) in this network"
        return (f"MACs: {100 * self.accelerator_share:.1f} % of {self.total / 1e6:,.1f} M on the accelerator "
                f"({self.host / 1e6:,.1f} M on the host)")


def mac_split(g: Graph, accelerator_nodes: set[str]) -> MacSplit:
    """The MACs of `g`'s nodes named in `accelerator_nodes` (its accelerator tasks) against the rest."""
    acc = host = 0
    for n in g.nodes:
        m = node_macs(g, n)
        if n.name in accelerator_nodes:
            acc += m
        else:
            host += m
    return MacSplit(acc, host)


def module_macs(module) -> MacSplit:
    """`mac_split` of a CompiledModule: its accelerator tasks against its host nodes."""
    return mac_split(module.graph, {t.node for t in module.vta_tasks()})
