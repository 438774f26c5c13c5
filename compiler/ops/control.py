"""Control flow on the host: If (a condition fed at run time), Loop and Scan, their bodies graphs of their own.

The frontend (`frontend/control_flow.py`) inlines an If whose condition is known at compile time; what
is left here runs on the host.  Each body was imported by the same importer as the model (its own ops,
their numpy and llvmlite kernels, onnx.reference only for ops nothing else implements) and is kept in the
node's attributes as plain data (`Body`: nodes, the names it reads and returns, JSON-safe for the module
file).  The values a body reads from the graph around it, constants included, are inputs of the node, so
the passes see every dependency.  As everywhere in the IR a node computes one output, so a body is cut
down to what that output needs (an If branch to its output's nodes; a Loop or Scan to its carried state
and that one scan output).  Output shapes are fixed at compile time and checked again after each run.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.registry import OpDef, Precision, contiguous, fail, op_def, register

MAX_TRIPS = 1 << 20
"""A Loop stops with an error past this many iterations (a trip count fed at run time must not hang a run)."""


# ------------------------------------------------------------------------------------------ bodies
def body_dict(formals: list[str], bind: list[tuple[str, int]], nodes: list[Node], outputs: list[str],
              tensors: dict[str, TensorInfo]) -> dict:
    """A body as node attributes: `formals` are what the op passes in each run (a Loop's iteration and
    state, a Scan's state and slices), `bind` maps body names to the node's inputs by position."""
    return dict(formals=list(formals), bind=[[b, int(i)] for b, i in bind],
                nodes=[[n.op, n.name, list(n.inputs), list(n.outputs), n.attrs] for n in nodes],
                outputs=list(outputs), infos={t: [list(tensors[t].shape), tensors[t].dtype] for t in outputs})


def prune(nodes: list[Node], outputs: list[str]) -> list[Node]:
    """The nodes `outputs` need, in order (a body cut down to one of its op's outputs)."""
    need, kept = set(outputs), []
    for n in reversed(nodes):
        if need.intersection(n.outputs):
            kept.append(n)
            need.update(t for t in n.inputs if t)
    return kept[::-1]


def run_body(node: Node, body: dict, formals: list, args: list, k) -> list:
    """The body's outputs from its formal values and the node's input values (`args`), each node run by
    its registered host code."""
    env = dict(zip(body["formals"], formals))
    env.update((name, args[i]) for name, i in body["bind"])
    for op, name, ins, outs, attrs in body["nodes"]:
        inner = Node(op, name, ins, outs, attrs)
        try:
            env[outs[0]] = op_def(op, inner).run(inner, [env[t] if t else None for t in ins], k)
        except KeyError as e:
            raise fail(node, f"its body's node {name!r} reads {e}, which nothing computed") from None
    return [env[o] for o in body["outputs"]]


def _declared(node: Node) -> TensorInfo:
    return TensorInfo(tuple(node.attrs["shape"]), node.attrs["dtype"])


def _checked(node: Node, value) -> np.ndarray:
    """The output, refused unless it has the shape and type declared at compile time."""
    y = np.asarray(value)
    want = _declared(node)
    if tuple(y.shape) != want.shape or y.dtype.name != want.dtype:
        raise fail(node, f"computed {y.dtype.name} {tuple(y.shape)} where {want.dtype} {want.shape} was declared at "
                         f"compile time (shapes are fixed then)")
    return contiguous(y)


def _infer(node: Node, g: Graph) -> list[TensorInfo]:
    return [_declared(node)]


# ------------------------------------------------------------------------------------------------ If
def _truth(node: Node, value, what: str) -> bool:
    v = np.asarray(value)
    if v.size != 1:
        raise fail(node, f"{what} holds {v.size} values; one boolean expected")
    return bool(v.reshape(-1)[0])


def _run_if(node: Node, args: list, k) -> np.ndarray:
    body = node.attrs["then"] if _truth(node, args[0], "the condition") else node.attrs["else"]
    return _checked(node, run_body(node, body, [], args, k)[0])


# ---------------------------------------------------------------------------------------------- Loop
def _run_loop(node: Node, args: list, k) -> np.ndarray:
    """ONNX's Loop: while (no trip count or i < M) and (no condition input or cond): body(i, cond, state)."""
    a = node.attrs
    body, n_state, out = a["body"], a["n_state"], a["out"]
    trips = None if args[0] is None else int(np.asarray(args[0]).reshape(-1)[0])
    uses_cond = args[1] is not None
    cond = _truth(node, args[1], "the initial condition") if uses_cond else True
    state = list(args[2:2 + n_state])
    scanned = []
    i = 0
    while (trips is None or i < trips) and cond:
        if i >= MAX_TRIPS:
            raise fail(node, f"ran {MAX_TRIPS} iterations without stopping (its trip count or condition)")
        outs = run_body(node, body, [np.array(i, np.int64), np.array(cond), *state], args, k)
        if uses_cond:
            cond = _truth(node, outs[0], "the body's condition")
        state = outs[1:1 + n_state]
        if out >= n_state:
            scanned.append(outs[1 + n_state])
        i += 1
    if out < n_state:
        return _checked(node, state[out])
    if not scanned:
        return _checked(node, np.zeros(a["shape"], a["dtype"]))
    return _checked(node, np.stack(scanned))


# ---------------------------------------------------------------------------------------------- Scan
def _run_scan(node: Node, args: list, k) -> np.ndarray:
    """ONNX's Scan (opset 9 on): each step reads one slice of every scan input (along its axis, forwards
    or backwards), updates the state, and emits one slice of every scan output."""
    a = node.attrs
    body, n_state, out = a["body"], a["n_state"], a["out"]
    n_scan = len(a["in_axes"])
    state = list(args[:n_state])
    xs = [np.asarray(args[n_state + j]) for j in range(n_scan)]
    steps = xs[0].shape[a["in_axes"][0]]
    scanned = []
    for t in range(steps):
        slices = [np.asarray(np.take(x, steps - 1 - t if rev else t, axis=ax))  # a 0-d array, not a numpy scalar
                  for x, ax, rev in zip(xs, a["in_axes"], a["in_dirs"])]
        outs = run_body(node, body, [*state, *slices], args, k)
        state = outs[:n_state]
        if out >= n_state:
            scanned.append(outs[n_state])
    if out < n_state:
        return _checked(node, state[out])
    if not scanned:
        return _checked(node, np.zeros(a["shape"], a["dtype"]))
    if a["out_dir"]:
        scanned = scanned[::-1]
    return _checked(node, np.stack(scanned, axis=a["out_axis"]))


def _convert(imp, n, name: str, at: dict) -> None:
    """The importer's own: inlining a branch or importing a body needs the scopes of the graphs around the
    node, which the importer holds (frontend/control_flow.py)."""
    imp.control_flow(n, name)


_DOC = "bodies run by their ops' host code, imported by the frontend (frontend/control_flow.py)"
register(OpDef("If", _infer, _run_if, Precision.FLOAT, ("If",), _convert, (1, 11, 13, 16, 19, 21, 23),
               kernel="numpy", doc="a condition known at compile time is inlined; else " + _DOC))
register(OpDef("Loop", _infer, _run_loop, Precision.FLOAT, ("Loop",), _convert, (1, 11, 13, 16, 19, 21, 23),
               kernel="numpy", doc=_DOC))
register(OpDef("Scan", _infer, _run_scan, Precision.FLOAT, ("Scan",), _convert, (9, 11, 16, 19, 21, 23),
               kernel="numpy", doc=_DOC))
