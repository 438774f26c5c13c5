"""Clean-up passes: constant folding, dead code, common subexpressions, no-op removal.

Each takes a Graph and returns a new one (the input is left alone), so a pass
can be tested on a hand-built graph and passes compose in any order.
"""

from __future__ import annotations


from vtakit.compiler.ops.execute import run_node
from vtakit.compiler.ops.registry import contiguous
from vtakit.compiler.ir import Graph

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
    outputs = set(g.outputs)
    by_content: dict[tuple, str] = {}
    renames: dict[str, str] = {}  # tensor -> the equal one its readers read instead
    for name in list(g.consts):
        arr = g.consts[name]
        if arr.size > 4096:
            continue  # big tensors are weights; comparing them is not worth it
        k = (arr.dtype.str, arr.shape, arr.tobytes())
        if k in by_content and name not in outputs:
            renames[name] = by_content[k]
        else:
            by_content.setdefault(k, name)
    seen: dict[tuple, list[str]] = {}
    kept = []
    for n in g.nodes:  # in order, so a node's inputs are renamed before its key is taken
        if any(i in renames for i in n.inputs):
            n.inputs = [renames.get(i, i) for i in n.inputs]
        k = _key(g, n)
        if k in seen and not any(o in outputs for o in n.outputs):
            renames.update(zip(n.outputs, seen[k]))
            continue
        seen[k] = n.outputs
        kept.append(n)
    g.nodes = kept
    g.rename_uses(renames)  # nodes out of order and graph outputs
    g.prune()
    return g


def remove_noops(graph: Graph) -> Graph:
    """Identity, transposes that cancel, reshapes to the same shape, reshape chains, zero pads."""
    g = graph.copy()
    prod = g.producers()
    outputs = set(g.outputs)
    kept, kept_ids = [], set()
    same: dict[str, str] = {}  # tensor -> the earlier tensor with the same value, which its readers read
    for n in g.nodes:  # in order, so a node's inputs are forwarded before it is looked at
        if any(i in same for i in n.inputs):
            n.inputs = [same.get(i, i) for i in n.inputs]
        x = n.inputs[0] if n.inputs else None
        out = n.outputs[0] if n.outputs else None
        if out in outputs:
            kept.append(n)  # graph outputs keep their ONNX names, so their producer stays
            kept_ids.add(id(n))
            continue
        if n.op == "Identity" or (n.op in ("Reshape", "Flatten") and g.tensors[x].shape == g.tensors[out].shape) \
                or (n.op == "Pad" and not any(n.attrs["pads"])) \
                or (n.op == "Transpose" and list(n.attrs["perm"]) == sorted(n.attrs["perm"])):
            same[out] = x
            continue
        p = prod.get(x)
        if n.op == "Transpose" and p is not None and p.op == "Transpose" and id(p) in kept_ids:
            perm = [p.attrs["perm"][i] for i in n.attrs["perm"]]
            if perm == sorted(perm):
                same[out] = p.inputs[0]
                continue
            n.inputs, n.attrs = [p.inputs[0]], dict(perm=perm)
        if n.op in ("Reshape", "Flatten") and p is not None and p.op in ("Reshape", "Flatten") and id(p) in kept_ids:
            n.op, n.inputs, n.attrs = "Reshape", [p.inputs[0]], dict(shape=list(g.tensors[out].shape))
        kept.append(n)
        kept_ids.add(id(n))
    g.nodes = kept
    g.rename_uses(same)  # nodes out of order (graph outputs are never forwarded)
    return eliminate_dead_code(g)


def simplify(graph: Graph) -> Graph:
    """The clean-up pipeline, run to a fixed point (it converges in two or three rounds)."""
    g = graph
    for _ in range(4):
        before = len(g.nodes), len(g.consts)
        g = remove_noops(eliminate_common_subexpressions(eliminate_dead_code(fold_constants(g))))
        if (len(g.nodes), len(g.consts)) == before:
            break
    return g
