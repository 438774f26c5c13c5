"""Clean-up passes: constant folding, dead code, common subexpressions, no-op removal.

Each takes a Graph and returns a new one (the input is left alone), so a pass
can be tested on a hand-built graph and passes compose in any order.
"""

from __future__ import annotations


from vtakit.compiler.graph.execute import run_node
from vtakit.compiler.graph.ops.registry import contiguous
from vtakit.compiler.graph.ir import Graph

FOLD_LIMIT = 1 << 24  # never materialise a folded constant bigger than this many elements


def fold_constants(graph: Graph) -> Graph:
    """Evaluate every node whose inputs are all constants (e.g. a Reshape or Transpose of weights)."""
    g = graph.copy()
    kept = []
    for n in g.nodes:
        if n.inputs and all(not i or g.is_const(i) for i in n.inputs) and \
                all(g.tensors[o].size <= FOLD_LIMIT for o in n.outputs):
            value = run_node(n, [g.consts[i] if i else None for i in n.inputs])
            g.consts[n.outputs[0]] = contiguous(value)
        else:
            kept.append(n)
    g.nodes = kept
    g.prune()
    return g


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes whose outputs nobody reads (walking back from the graph outputs)."""
    g = graph.copy()
    live = set(g.outputs)
    kept = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(i for i in n.inputs if i)
    g.nodes = kept[::-1]
    g.prune()
    return g


def _key(g: Graph, n) -> tuple:
    def freeze(v):
        if isinstance(v, (list, tuple)):
            return tuple(freeze(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((k, freeze(x)) for k, x in v.items()))
        return v

    return n.op, tuple(n.inputs), freeze(n.attrs)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Two nodes with the same op, attributes and inputs compute the same value: keep the first.

    Identical constants are merged first so that duplicated weight initializers count as the same input."""
    g = graph.copy()
    by_content: dict[tuple, str] = {}
    for name in list(g.consts):
        arr = g.consts[name]
        if arr.size > 4096:
            continue  # big tensors are weights; comparing them is not worth it
        k = (arr.dtype.str, arr.shape, arr.tobytes())
        if k in by_content and name not in g.outputs:
            g.replace_uses(name, by_content[k])
        else:
            by_content.setdefault(k, name)
    seen: dict[tuple, list[str]] = {}
    kept = []
    for n in g.nodes:
        k = _key(g, n)
        if k in seen and not any(o in g.outputs for o in n.outputs):
            for old, new in zip(n.outputs, seen[k]):
                g.replace_uses(old, new)
            continue
        seen[k] = n.outputs
        kept.append(n)
    g.nodes = kept
    g.prune()
    return g


def remove_noops(graph: Graph) -> Graph:
    """Identity, transposes that cancel, reshapes to the same shape, reshape chains, zero pads."""
    g = graph.copy()
    prod = g.producers()
    kept = []
    for n in g.nodes:
        x = n.inputs[0] if n.inputs else None
        out = n.outputs[0] if n.outputs else None
        if out in g.outputs:
            kept.append(n)  # graph outputs keep their ONNX names, so their producer stays
            continue
        if n.op == "Identity" or (n.op in ("Reshape", "Flatten") and g.tensors[x].shape == g.tensors[out].shape) \
                or (n.op == "Pad" and not any(n.attrs["pads"])) \
                or (n.op == "Transpose" and list(n.attrs["perm"]) == sorted(n.attrs["perm"])):
            _forward(g, out, x)
            continue
        p = prod.get(x)
        if n.op == "Transpose" and p is not None and p.op == "Transpose" and p in kept:
            perm = [p.attrs["perm"][i] for i in n.attrs["perm"]]
            if perm == sorted(perm):
                _forward(g, out, p.inputs[0])
                continue
            n.inputs, n.attrs = [p.inputs[0]], dict(perm=perm)
        if n.op in ("Reshape", "Flatten") and p is not None and p.op in ("Reshape", "Flatten") and p in kept:
            n.op, n.inputs, n.attrs = "Reshape", [p.inputs[0]], dict(shape=list(g.tensors[out].shape))
        kept.append(n)
    g.nodes = kept
    return eliminate_dead_code(g)


def _forward(g: Graph, out: str, x: str) -> None:
    """`out` is the same value as `x`: its readers read `x` instead."""
    g.replace_uses(out, x)


def simplify(graph: Graph) -> Graph:
    """The clean-up pipeline, run to a fixed point (it converges in two or three rounds)."""
    g = graph
    for _ in range(4):
        before = len(g.nodes), len(g.consts)
        g = remove_noops(eliminate_common_subexpressions(eliminate_dead_code(fold_constants(g))))
        if (len(g.nodes), len(g.consts)) == before:
            break
    return g
