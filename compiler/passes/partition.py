"""Partitioning: which nodes of a quantized graph become accelerator tasks, which stay on the host.

The accelerator takes int8 convolutions with one stride (any padding),
depthwise convolutions where the cycle model puts them below the host round
trip (vta/depthwise.py), dense layers, same-shape residual adds, relu and square
max pooling (ops.py's operators); everything else runs on the host.  VTA kept the first
convolution (3 input channels waste 13/16 of the GEMM) and the classifier on the
CPU; `PartitionOptions` makes that a choice instead of a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vtakit.errors import CompileError
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.ops import Precision, op_def, precision_of
from vtakit.compiler.backends.vta.graph_ops import NO_FORM, accelerator_reason, refusal_reason
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


def _forced(g: Graph, options: PartitionOptions, conv: str, dense: str) -> set[str]:
    """The nodes `options` puts on the host (`conv`, `dense`: the op names of the graph's convolutions
    and dense layers, float or int8)."""
    unknown = sorted(set(options.host_nodes) - {n.name for n in g.nodes})
    if unknown:
        raise CompileError(f"host_nodes names unknown nodes {unknown}")
    convs = [n for n in g.nodes if n.op == conv]
    denses = [n for n in g.nodes if n.op == dense]
    forced = set(options.host_nodes)
    if options.first_conv == "host" and convs:
        forced.add(convs[0].name)
    if options.classifier == "host" and denses:
        forced.add(denses[-1].name)
    return forced


def partition(g: Graph, cfg: HwConfig, options: PartitionOptions | None = None) -> dict[str, str]:
    """node name -> "vta" or "host"; `g.notes["host_reasons"]` says why each host node is there."""
    forced = _forced(g, options or PartitionOptions(), "QConv", "QDense")
    place, reasons = {}, {}
    for n in g.nodes:
        why = "asked for the host" if n.name in forced else accelerator_reason(g, n, cfg)
        place[n.name] = "vta" if why is None else "host"
        if why is not None:
            reasons[n.name] = host_reason(n, why)
    g.notes["host_reasons"] = reasons
    return place


BORDER_OPS = {"Quantize": "float to int8 at the accelerator's border", "Dequantize": "int8 to float at the "
              "accelerator's border"}


def host_reason(n: Node, why: str) -> str:
    """The reason the report gives for a host node: the placement rule's, made specific where the rule only
    says the op has no accelerator form (a float op, a conversion, a node the quantizer kept in float)."""
    if n.op in BORDER_OPS:
        return BORDER_OPS[n.op]
    kept = n.attrs.get("keep_float")
    if kept:
        return f"kept in float: {kept}" if isinstance(kept, str) else "kept in float, as asked"
    if why == NO_FORM:
        return f"no accelerator form for {n.op}"
    return why


ISOLATED_ADD = "its operands come from the host: on the accelerator it would cost three crossings and buy nothing"


def host_bound(g: Graph, cfg: HwConfig, options: PartitionOptions | None = None) -> dict[str, str]:
    """The float graph's int8-capable nodes (Conv, Dense, Add) that would run on the host, node -> why:
    quantizing them buys no speed and costs accuracy, so they stay float there (precision follows placement).

    A node goes to the host when the placement rule of its int8 op refuses it on a one-node view with int8
    activations (its geometry decides: strides, dilations, grouping, shapes; not the exponents quantization
    will choose, and not a cost choice such as a depthwise conv the cycle model puts cheaper on the host,
    which is made on the int8 node as before), when the options ask for the host, or, for an add, when
    neither operand comes from the accelerator (through precision-neutral ops)."""
    forced = _forced(g, options or PartitionOptions(), "Conv", "Dense")
    out: dict[str, str] = {}
    on_accelerator: set[str] = set()  # tensors an accelerator node would make (then int8 through neutral ops)
    for n in g.nodes:
        d = op_def(n.op, n)
        acts = [i for i in n.inputs if i and not g.is_const(i)]
        if d.int8_op is None:
            if precision_of(n.op) is Precision.NEUTRAL and acts and all(i in on_accelerator for i in acts):
                on_accelerator.update(n.outputs)
            continue
        if n.attrs.get("keep_float") or (d.int8_form is not None and not d.int8_form(g, n)):
            continue
        view = _int8_view(g, n, d.int8_op)
        why = "asked for the host" if n.name in forced else refusal_reason(view, view.nodes[0], cfg)
        if why is None and d.int8_rule == "sum" and not any(i in on_accelerator for i in acts):
            why = ISOLATED_ADD
        if why is None:
            on_accelerator.update(n.outputs)
        else:
            out[n.name] = why
    return out


def _int8_view(g: Graph, n: Node, int8_op: str) -> Graph:
    """A graph of `n`'s tensors alone, its activations int8 and its output int8 (what placement reads)."""
    tensors = {t: g.tensors[t] for t in [*n.inputs, *n.outputs] if t}
    for t in tensors:
        if not g.is_const(t):
            tensors[t] = replace(tensors[t], dtype="int8")
    consts = {t: g.consts[t] for t in n.inputs if t and g.is_const(t)}
    node = Node(int8_op, n.name, list(n.inputs), list(n.outputs), dict(n.attrs))
    return Graph([node], tensors, [t for t in n.inputs if t and t not in consts], list(n.outputs), consts)
