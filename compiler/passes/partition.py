"""Partitioning: which nodes of a quantized graph become accelerator tasks, which stay on the host.

The accelerator takes int8 convolutions with one stride (any padding),
depthwise convolutions where the cycle model puts them below the host round
trip (vta/depthwise.py), dense layers, same-shape residual adds, relu and square
max pooling (ops.py's operators); everything else runs on the host.  VTA kept the first
convolution (3 input channels waste 13/16 of the GEMM) and the classifier on the
CPU; `PartitionOptions` makes that a choice instead of a rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import CompileError
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.backends.vta.graph_ops import accelerator_reason
from vtakit.isa.config import HwConfig

PLACES = ("vta", "host")


@dataclass(frozen=True)
class PartitionOptions:
    first_conv: str = "vta"  # "vta" or "host": the network's first convolution
    classifier: str = "vta"  # "vta" or "host": the last dense layer
    host_nodes: tuple[str, ...] = ()  # node names forced onto the host
    fuse_residual: bool = True  # residual adds join the epilogue of the accelerator conv producing them (fusion.py)
    fuse_pool: bool = True  # a max pool joins the task of the accelerator conv producing its input (fusion.py)

    def __post_init__(self) -> None:
        for what in ("first_conv", "classifier"):
            if getattr(self, what) not in PLACES:
                raise CompileError(f"partition option {what} must be 'vta' or 'host', got {getattr(self, what)!r}")


def partition(g: Graph, cfg: HwConfig, options: PartitionOptions | None = None) -> dict[str, str]:
    """node name -> "vta" or "host"; `g.notes["host_reasons"]` says why each int8 node stayed on the host."""
    options = options or PartitionOptions()
    names = {n.name for n in g.nodes}
    unknown = sorted(set(options.host_nodes) - names)
    if unknown:
        raise CompileError(f"host_nodes names unknown nodes {unknown}")
    convs = [n for n in g.nodes if n.op == "QConv"]
    denses = [n for n in g.nodes if n.op == "QDense"]
    forced = set(options.host_nodes)
    if options.first_conv == "host" and convs:
        forced.add(convs[0].name)
    if options.classifier == "host" and denses:
        forced.add(denses[-1].name)
    place, reasons = {}, {}
    for n in g.nodes:
        why = "asked for the host" if n.name in forced else accelerator_reason(g, n, cfg)
        place[n.name] = "vta" if why is None else "host"
        if why is not None and n.op.startswith("Q") and n.op not in ("Quantize",):
            reasons[n.name] = why
    g.notes["host_reasons"] = reasons
    return place
