"""Accelerator fusion after partitioning: a residual add (with its ReLU, the QAdd's clip) joins the
epilogue of the convolution that produces one of its operands.

The pair QConv -> QAdd becomes one QConv with the other operand as a fourth input ("res") and the
add's shift and clip as `residual`: on the accelerator the conv's requantized int8 tile gets the
residual tile added in the accumulator (an identity GEMM from INP without LOAD.ACC8, lowering/move.py)
and is stored once, so the add makes no pass of its own over DRAM and the conv's own output never
goes there.  On the host the fused node runs the same two kernels in a row: bit-identical.
"""

from __future__ import annotations

from vtakit.compiler.graph.ir import Graph, Node


def _fusable_conv(g: Graph, n: Node, tensor: str, place: dict[str, str], producers, consumers) -> Node | None:
    """The QConv producing `tensor` if the add `n` is its only reader and both run on the accelerator."""
    conv = producers.get(tensor)
    if conv is None or conv.op != "QConv" or place.get(conv.name) != "vta" or "residual" in conv.attrs:
        return None
    if [c.name for c in consumers.get(tensor, [])] != [n.name] or tensor in g.outputs:
        return None
    if "shift" not in conv.attrs or g.tensors[tensor].dtype != "int8" or conv.attrs["group"] != 1:
        return None
    return conv


def fuse_residual_adds(g: Graph, place: dict[str, str]) -> dict[str, str]:
    """Fuse every accelerator QAdd into a producing accelerator QConv (in place); returns the new placement.

    Of two fusable operands the later-produced conv takes the add (the other operand is then ready)."""
    producers, consumers = g.producers(), g.consumers()
    order = {n.name: i for i, n in enumerate(g.nodes)}
    fused: dict[str, Node] = {}   # add name -> fused node
    dropped: set[str] = set()
    for n in g.nodes:
        if n.op != "QAdd" or place.get(n.name) != "vta" or len(n.inputs) != 2:
            continue
        options = [(i, c) for i, t in enumerate(n.inputs)
                   if (c := _fusable_conv(g, n, t, place, producers, consumers)) is not None]
        if not options:
            continue
        i, conv = max(options, key=lambda o: order[o[1].name])
        x, w = conv.inputs[0], conv.inputs[1]
        bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
        attrs = dict(conv.attrs, residual=(int(n.attrs.get("shift") or 0), tuple(n.attrs["clip"])), residual_of=n.name)
        fused[n.name] = Node("QConv", conv.name, [x, w, bias, n.inputs[1 - i]], list(n.outputs), attrs)
        dropped.add(conv.name)
    if not fused:
        return place
    g.nodes = [fused.get(n.name, n) for n in g.nodes if n.name not in dropped]
    g.prune()
    g.validate()
    return {n.name: place[n.name] for n in g.nodes}  # a fused node keeps its conv's name (and place)
