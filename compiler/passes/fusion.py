"""Accelerator fusion after partitioning: a residual add (with its ReLU, the QAdd's clip) joins the
epilogue of the convolution that produces one of its operands, and a max pool reading a convolution
joins that convolution's task.

The pair QConv -> QAdd (or QDense -> QAdd: a transformer's residual stream) becomes one QConv with the other operand as a fourth input ("res") and the
add's shift and clip as `residual`: on the accelerator the conv's requantized int8 tile gets the
residual tile added in the accumulator (an identity GEMM from INP without LOAD.ACC8, lowering/move.py)
and is stored once, so the add makes no pass of its own over DRAM and the conv's own output never
goes there.  On the host the fused node runs the same two kernels in a row: bit-identical.  A wide
conv (quant/techniques/wide_residual.py) adds its unclipped result and the operand times 2**`residual_bits`.

The pair QConv -> MaxPool (ResNet's conv1 and its 3x3/2 pool) becomes one QConv with `pool` = (kernel,
stride, pad): the accelerator pools each finished int8 tile on chip (`compiler/backends/vta/lowering/pool.py`)
and stores only the pooled tensor, so the conv's output never goes to DRAM and the pool makes no
pass of its own.  Pools the accelerator form does not take (placed on the host) stay apart.
"""

from __future__ import annotations

from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.backends.vta.graph_ops import pool_fusion_reason
from vtakit.compiler.quant.techniques.wide_residual import WIDE_ADD_REASON, WIDE_CONV_REASON
from vtakit.isa.config import HwConfig


def _on_vta(g: Graph, n: Node, place: dict[str, str]) -> bool:
    """Whether `n` runs on the accelerator, or would but for the one reason fusing a wide pair lifts
    (quant.techniques.wide_residual: an unfused wide conv and its add stay on the host)."""
    why = g.notes.get("host_reasons", {}).get(n.name)
    return place.get(n.name) == "vta" or why in (WIDE_CONV_REASON, WIDE_ADD_REASON)


def _fusable_conv(g: Graph, n: Node, tensor: str, place: dict[str, str], producers, consumers,
                  residual_ok: bool = False) -> Node | None:
    """The QConv producing `tensor` if `n` is its only reader and both run on the accelerator (a conv
    with a fused residual add takes no second one; with `residual_ok` it may take a pool)."""
    conv = producers.get(tensor)
    if conv is None or conv.op not in ("QConv", "QDense") or not _on_vta(g, conv, place) or "pool" in conv.attrs \
            or ("residual" in conv.attrs and not residual_ok) or ("wide" in conv.attrs and n.op != "QAdd") \
            or (conv.op == "QDense" and ("wide" in conv.attrs or n.op != "QAdd")):
        return None
    if [c.name for c in consumers.get(tensor, [])] != [n.name] or tensor in g.outputs:
        return None
    dtype = "int32" if "wide" in conv.attrs and "residual" not in conv.attrs else "int8"
    if "shift" not in conv.attrs or g.tensors[tensor].dtype != dtype or conv.attrs.get("group", 1) != 1:
        return None
    return conv


def fuse_residual_adds(g: Graph, place: dict[str, str]) -> dict[str, str]:
    """Fuse every accelerator QAdd into a producing accelerator QConv (in place); returns the new placement.

    Of two fusable operands the later-produced conv takes the add (the other operand is then ready);
    a wide conv (quant.techniques.wide_residual) always, with its skip's left shift as `residual_bits`.  An
    unfused wide pair stays on the host."""
    producers, consumers = g.producers(), g.consumers()
    reasons = g.notes.get("host_reasons", {})
    place = dict(place)
    order = {n.name: i for i, n in enumerate(g.nodes)}
    fused: dict[str, Node] = {}   # add name -> fused node
    dropped: set[str] = set()
    for n in g.nodes:
        if n.op != "QAdd" or not _on_vta(g, n, place) or len(n.inputs) != 2:
            continue
        options = [(i, c) for i, t in enumerate(n.inputs)
                   if (c := _fusable_conv(g, n, t, place, producers, consumers)) is not None]
        if "left" in n.attrs:  # only the wide operand may take it
            options = [(i, c) for i, c in options if "wide" in c.attrs]
        if not options:
            continue
        i, conv = max(options, key=lambda o: order[o[1].name])
        x, w = conv.inputs[0], conv.inputs[1]
        bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
        attrs = dict(conv.attrs, residual=(int(n.attrs.get("shift") or 0), tuple(n.attrs["clip"])), residual_of=n.name)
        if "left" in n.attrs:
            attrs["residual_bits"] = int(n.attrs["left"][1 - i])
        place[conv.name] = "vta"
        for name in (conv.name, n.name):
            reasons.pop(name, None)
        fused[n.name] = Node(conv.op, conv.name, [x, w, bias, n.inputs[1 - i]], list(n.outputs), attrs)
        dropped.add(conv.name)
    return _apply_fusions(g, place, fused, dropped)


def _apply_fusions(g: Graph, place: dict[str, str], fused: dict[str, Node], dropped: set[str]) -> dict[str, str]:
    """Put each fused node where the node it absorbs was, drop the convs it replaces; returns the new
    placement (a fused node keeps its conv's name, and so its place)."""
    if not fused:
        return place
    g.nodes = [fused.get(n.name, n) for n in g.nodes if n.name not in dropped]
    g.prune()
    g.validate()
    return {n.name: place[n.name] for n in g.nodes}


def _pool_window(n: Node) -> tuple[int, int, int]:
    a = n.attrs
    return int(a["kernel"][0]), int(a["strides"][0]), int(a["pads"][0])


def fuse_max_pools(g: Graph, place: dict[str, str], cfg: HwConfig | None = None) -> dict[str, str]:
    """Fuse every accelerator MaxPool into the accelerator QConv producing its input (in place; the
    conv's only reader, int8, not pooled already; with `cfg`, only where a tiling leaves room for the
    pool: else the pool stays its own task); returns the new placement."""
    producers, consumers = g.producers(), g.consumers()
    fused: dict[str, Node] = {}   # pool name -> fused node
    dropped: set[str] = set()
    for n in g.nodes:
        if n.op != "MaxPool" or place.get(n.name) != "vta":
            continue
        conv = _fusable_conv(g, n, n.inputs[0], place, producers, consumers, residual_ok=True)
        if conv is None or "pool" in conv.attrs or len(g.tensors[conv.inputs[0]].shape) != 4 or (
                cfg is not None and pool_fusion_reason(g, conv, cfg, _pool_window(n))):
            continue
        attrs = dict(conv.attrs, pool=_pool_window(n), pool_of=n.name)
        fused[n.name] = Node("QConv", conv.name, list(conv.inputs), list(n.outputs), attrs)
        dropped.add(conv.name)
    return _apply_fusions(g, place, fused, dropped)
