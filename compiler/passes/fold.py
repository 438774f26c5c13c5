"""Folding passes: batch norm and per-channel scale/shift into convolutions, Gemm/MatMul into Dense,
and activation fusion (conv/dense/add + relu/clip become one node with an output range).

After these, an inference network is a chain of Conv/Dense/Add nodes carrying
their own bias and activation range, which is the shape the quantizer and the
accelerator's fused conv+bias+relu+requantize task want.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.ops import int8_rule
from vtakit.compiler.passes.simplify import eliminate_dead_code


def _sole_reader(g: Graph, users: dict[str, list[Node]], tensor: str) -> Node | None:
    readers = users.get(tensor, [])
    if len(readers) != 1 or tensor in g.outputs:
        return None
    return readers[0]


def _absorb(g: Graph, node: Node, nxt: Node) -> Node:
    """`nxt` (the only reader of `node`) is folded into `node`: node now produces nxt's output name,
    which keeps the names downstream nodes and graph outputs use.  Returns `nxt`, which the caller
    drops from the graph."""
    node.outputs = [nxt.outputs[0]]
    return nxt


def _channel_vector(g: Graph, name: str, channels: int, rank: int) -> np.ndarray | None:
    """The constant `name` as a (C,) vector when it broadcasts one value per channel (`channel_vector`)."""
    return channel_vector(g.consts[name].astype(np.float64), channels, rank) if name in g.consts else None


def channel_vector(v: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """`v` as a (C,) vector when it broadcasts as one value per channel (axis 1) of a rank-`rank` tensor
    (NCHW, NCL or NC), a scalar repeated; None otherwise."""
    if v.size == 1:
        return np.full(channels, float(v.reshape(-1)[0]))
    axis = v.ndim - (rank - 1)  # the axis of v that meets axis 1 when numpy broadcasts it against the tensor
    if axis >= 0 and v.size == channels and v.shape[axis] == channels:
        return v.reshape(-1)
    return None


def _set_conv_params(g: Graph, conv: Node, weight: np.ndarray, bias: np.ndarray) -> None:
    conv.inputs = [conv.inputs[0], g.add_const(f"{conv.name}.weight", weight.astype(np.float32)),
                   g.add_const(f"{conv.name}.bias", bias.astype(np.float32))]


def _params(g: Graph, conv: Node) -> tuple[np.ndarray, np.ndarray]:
    w = g.consts[conv.inputs[1]].astype(np.float64)
    o = w.shape[0]
    b = g.consts[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(o)
    return w, b


def _foldable(g: Graph, node: Node) -> bool:
    return int8_rule(node.op) == "weights" and g.is_const(node.inputs[1]) and \
        (len(node.inputs) < 3 or not node.inputs[2] or g.is_const(node.inputs[2]))


def _rewrite_until_stable(graph: Graph, rewrite) -> Graph:
    """Apply `rewrite(g, users, node) -> absorbed node or None` to each node, in order, until it
    declines, then drop the absorbed nodes: one walk, linear in the graph's size.

    The reader lists are built once and stay true: a rewrite only absorbs a node whose inputs are the
    rewritten node's output and constants, and the rewritten node takes over the absorbed node's output
    name, whose readers do not change.  So no earlier node can become rewritable, and this ends where
    rescanning from the start after every change (what this did before, quadratic) ended."""
    g = graph.copy()
    users = g.consumers()
    absorbed: set[int] = set()
    for node in g.nodes:
        if id(node) in absorbed:
            continue
        while (nxt := rewrite(g, users, node)) is not None:
            absorbed.add(id(nxt))
    if absorbed:
        g.nodes = [n for n in g.nodes if id(n) not in absorbed]
    g.prune()
    return g


def _fold_next_into_conv(g: Graph, users: dict[str, list[Node]], node: Node) -> Node | None:
    if not _foldable(g, node) or not (nxt := _sole_reader(g, users, node.outputs[0])):
        return None
    w, b = _params(g, node)
    o = w.shape[0]
    wshape = (o,) + (1,) * (w.ndim - 1)
    if nxt.op == "BatchNormalization":
        if not all(g.is_const(i) for i in nxt.inputs[1:5]):
            return None  # statistics fed as graph inputs: batch norm runs as its own node
        gamma, beta, mean, var = (g.consts[i].astype(np.float64) for i in nxt.inputs[1:5])
        scale = gamma / np.sqrt(var + nxt.attrs["epsilon"])
        w, b = w * scale.reshape(wshape), (b - mean) * scale + beta
    elif nxt.op in ("Mul", "Add"):
        other = nxt.inputs[1] if nxt.inputs[0] == node.outputs[0] else nxt.inputs[0]
        v = _channel_vector(g, other, o, len(g.tensors[node.outputs[0]].shape))
        if v is None or g.tensors[nxt.outputs[0]].shape != g.tensors[node.outputs[0]].shape:
            return None
        if nxt.op == "Mul":
            w, b = w * v.reshape(wshape), b * v
        else:
            b = b + v
    else:
        return None
    _set_conv_params(g, node, w, b)
    return _absorb(g, node, nxt)


def fold_into_conv(graph: Graph) -> Graph:
    """Conv/Dense followed by BatchNormalization, Mul or Add by a per-channel constant: one Conv/Dense."""
    return _rewrite_until_stable(graph, _fold_next_into_conv)


def fold_pads(graph: Graph) -> Graph:
    """A zero Pad of H and W read only by a Conv becomes part of the Conv's own padding
    (which the accelerator does for free with its load padding fields)."""
    g = graph.copy()
    users = g.consumers()
    folded: set[int] = set()
    for pad in g.nodes:
        if pad.op != "Pad" or pad.attrs["value"] != 0.0 or len(pad.attrs["pads"]) != 8:
            continue
        p = pad.attrs["pads"]
        conv = _sole_reader(g, users, pad.outputs[0])
        if conv is None or conv.op != "Conv" or any(p[i] for i in (0, 1, 4, 5)):
            continue
        t, l, b, r = conv.attrs["pads"]
        conv.attrs["pads"] = (t + p[2], l + p[3], b + p[6], r + p[7])
        conv.inputs[0] = pad.inputs[0]
        folded.add(id(pad))
    if folded:
        g.nodes = [n for n in g.nodes if id(n) not in folded]
    g.prune()
    return g


def canonicalize_dense(graph: Graph) -> Graph:
    """Gemm (constant B, C) and 2-D MatMul by a constant become Dense: y = x @ W.T + b, W (O, K)."""
    g = graph.copy()
    for n in g.nodes:
        if n.op == "Gemm" and g.is_const(n.inputs[1]) and not n.attrs["transA"] and \
                (len(n.inputs) < 3 or not n.inputs[2] or g.is_const(n.inputs[2])):
            w = g.consts[n.inputs[1]].astype(np.float64)
            w = (w if n.attrs["transB"] else w.T) * n.attrs["alpha"]
            o = w.shape[0]
            b = np.zeros(o)
            if len(n.inputs) > 2 and n.inputs[2]:
                c = g.consts[n.inputs[2]].astype(np.float64) * n.attrs["beta"]
                if c.size not in (1, o) or (c.ndim == 2 and c.shape[0] != 1):
                    continue  # a C that varies by row is not a bias
                b = np.broadcast_to(c.reshape(-1), (o,)).copy()
        elif n.op == "MatMul" and g.is_const(n.inputs[1]) and g.consts[n.inputs[1]].ndim == 2 \
                and len(g.tensors[n.inputs[0]].shape) == 2:
            w = g.consts[n.inputs[1]].astype(np.float64).T
            b = np.zeros(w.shape[0])
        else:
            continue
        n.op, n.attrs = "Dense", {}
        _set_conv_params(g, n, w, b)
    g.prune()
    return g


def _range_of(g: Graph, node: Node) -> tuple[float, float] | None:
    if node.op == "Relu":
        return 0.0, float("inf")
    if node.op == "Clip":
        return node.attrs["lo"], node.attrs["hi"]
    return None


def _fuse_next_activation(g: Graph, users: dict[str, list[Node]], node: Node) -> Node | None:
    if int8_rule(node.op) is None and node.op not in ("Relu", "Clip"):
        return None
    nxt = _sole_reader(g, users, node.outputs[0])
    rng = _range_of(g, nxt) if nxt is not None else None
    if rng is None:
        return None
    if node.op in ("Relu", "Clip"):
        lo0, hi0 = _range_of(g, node)
        node.op, node.attrs = "Clip", dict(lo=max(lo0, rng[0]), hi=min(hi0, rng[1]))
    else:
        lo0, hi0 = node.attrs.get("act", (float("-inf"), float("inf")))
        node.attrs["act"] = (max(lo0, rng[0]), min(hi0, rng[1]))
    return _absorb(g, node, nxt)


def fuse_activations(graph: Graph) -> Graph:
    """Conv/Dense/Add followed by Relu or Clip (and chains of them) carry the range in attrs["act"]."""
    return eliminate_dead_code(_rewrite_until_stable(graph, _fuse_next_activation))
