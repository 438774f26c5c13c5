"""If, Loop and Scan at import: an If known at compile time is inlined, the rest become host ops with bodies.

An If whose condition folds to a constant (constants, or inputs the user binds: `bind={"sr": 16000}`)
is replaced by its taken branch: the branch's nodes are imported in its place, its own values renamed
where they would collide (`Scope`), its reads of the graph around it resolved through the scopes it sits
in, and each If output becomes an Identity of the branch's.  Nested Ifs fold the same way, branch by
branch.  Any other If, and every Loop and Scan, runs on the host (`ops/control.py`): each body is imported
as a graph of its own by a child importer (same opset, limits and op definitions, so its ops get their
own kernels and onnx.reference stays the last resort), with the values it reads from outside as inputs.
Output shapes are fixed here: an If whose branches give different shapes, a Loop state that changes
shape, or scan outputs whose length depends on values fed at run time are one CompileError naming the
node, with the way out (bind the condition, make the trip count a constant).
"""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper as nh

from vtakit.compiler.ir import Node, TensorInfo
from vtakit.compiler.ops.control import body_dict, prune
from vtakit.compiler.frontend.onnx_types import check_node_types
from vtakit.errors import CompileError

OPS = ("If", "Loop", "Scan")
Scope = ChainMap
"""Branch-local value name -> its name in the importing graph (inner branches first)."""


def _graph_attr(n, key: str):
    for a in n.attribute:
        if a.name == key:
            return a.g
    raise CompileError(f"has no {key!r} subgraph", node=n.name or None, op=n.op_type)


def subgraphs(n) -> list:
    """A node's subgraph attributes (If's branches, a Loop's or Scan's body)."""
    out = []
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def defined(graph) -> set[str]:
    """The names a (sub)graph gives values: its inputs, initializers and node outputs."""
    names = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    names.update(o for n in graph.node for o in n.output if o)
    return names


def free_names(graph) -> list[str]:
    """The values a (sub)graph reads from the graphs around it, nested subgraphs included, in first-read order."""
    own, seen, out = defined(graph), set(), []
    reads = [t for n in graph.node for t in list(n.input) + [f for g in subgraphs(n) for f in free_names(g)]]
    for t in reads + [o.name for o in graph.output]:
        if t and t not in own and t not in seen:
            seen.add(t)
            out.append(t)
    return out


def renamed(n, scope: Scope):
    """A copy of node `n` whose inputs and outputs are named as in the importing graph."""
    copy = onnx.NodeProto()
    copy.CopyFrom(n)
    for i, t in enumerate(n.input):
        copy.input[i] = scope.get(t, t) if t else t
    for i, t in enumerate(n.output):
        copy.output[i] = scope.get(t, t) if t else t
    return copy


def convert(imp, n, name: str, scope: Scope | None) -> list:
    """Import an If, Loop or Scan node (its inputs already renamed into the importing graph): the work
    items (node, scope) to import in its place (an inlined branch), or [] when it became a host op."""
    scope = scope if scope is not None else Scope()
    for t in n.input:
        if t and t not in imp.graph.tensors:
            raise CompileError(f"reads {t!r}, which no earlier node produces", node=name, op=n.op_type)
    if n.op_type == "If" and n.input[0] in imp.graph.consts:
        return _inline_if(imp, n, name, scope)
    check_node_types(n, imp.opset, imp.onnx_type, name)
    {"If": _host_if, "Loop": _host_loop, "Scan": _host_scan}[n.op_type](imp, n, name, scope)
    return []


# ------------------------------------------------------------------------------------------ inlining
def _inline_if(imp, n, name: str, scope: Scope) -> list:
    cond = np.asarray(imp.graph.consts[n.input[0]])
    if cond.size != 1:
        raise CompileError(f"its condition holds {cond.size} values; one boolean expected", node=name, op="If")
    branch = _graph_attr(n, "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
    if len(branch.output) != len(n.output):
        raise CompileError(f"its branch returns {len(branch.output)} values for {len(n.output)} outputs",
                           node=name, op="If")
    inner = scope.new_child({local: imp.fresh_name(local) for local in defined(branch)})
    for init in branch.initializer:
        imp.set_const(inner[init.name], nh.to_array(init), node=name, op="If")
    work = [(m, inner) for m in branch.node]
    for k, (out, value) in enumerate(zip(n.output, branch.output)):
        if out:
            work.append((_identity(inner.get(value.name, value.name), out, f"{name}/out{k}"), None))
    return work


def _identity(src: str, dst: str, name: str):
    return onnx.helper.make_node("Identity", [src], [dst], name=name)


# ------------------------------------------------------------------------------------------- bodies
@dataclass(frozen=True)
class Imported:
    """A body imported as a graph of its own: its nodes and tensors, and where each value it reads from
    outside comes from (`outer`: body name -> the importing graph's tensor, constants hoisted there)."""

    nodes: list[Node]
    tensors: dict[str, TensorInfo]
    outputs: list[str]
    outer: dict[str, str]


def import_body(imp, name: str, op: str, graph, formals: list[tuple[str, TensorInfo]], scope: Scope) -> Imported:
    """Import a body with `formals` (what the op passes in) as its inputs and the values it reads from the
    graph around it (`scope` resolves their names) as further inputs or constants."""
    outer: dict[str, str] = {}
    tensors: dict[str, TensorInfo] = dict(formals)
    consts: dict[str, np.ndarray] = {}
    formal_names = {f for f, _ in formals}
    for t in free_names(graph):
        if t in formal_names:
            continue
        src = scope.get(t, t)
        if src not in imp.graph.tensors:
            raise CompileError(f"its body reads {t!r}, which no earlier node produces", node=name, op=op)
        tensors[t] = imp.graph.tensors[src]
        if src in imp.graph.consts:
            consts[t] = imp.graph.consts[src]
        outer[t] = src
    child = imp.child(f"{name}/{graph.name or 'body'}", tensors, consts,
                      {t: imp.onnx_type(src) for t, src in outer.items()})
    body = child.import_body(graph)
    read = {t for m in body.nodes for t in m.inputs} | set(body.outputs)
    for t, value in body.consts.items():  # what the body holds or folded: constants of the importing graph
        if t in read and t not in outer:
            outer[t] = imp.fresh_name(f"{name}/{t}")
            imp.set_const(outer[t], value, node=name, op=op)
    return Imported(list(body.nodes), body.tensors, list(body.outputs), outer)


def _external(imp_body: Imported, nodes: list[Node], outputs: list[str], formals: list[str],
              inputs: list[str]) -> list[tuple[str, int]]:
    """The body names `nodes` and `outputs` read from outside, each bound to a position in `inputs` (the
    op node's inputs, extended with the outer tensors not there yet)."""
    reads = [t for n in nodes for t in n.inputs if t] + list(outputs)
    bind, seen = [], set(formals) | {o for n in nodes for o in n.outputs}
    for t in reads:
        if t in seen or t not in imp_body.outer:
            continue
        seen.add(t)
        src = imp_body.outer[t]
        if src not in inputs:
            inputs.append(src)
        bind.append((t, inputs.index(src)))
    return bind


def _body_for(body: Imported, formals: list[str], outputs: list[str], inputs: list[str]) -> dict:
    nodes = prune(body.nodes, outputs)
    return body_dict(formals, _external(body, nodes, outputs, formals, inputs), nodes, outputs, body.tensors)


def _host_if(imp, n, name: str, scope: Scope) -> None:
    branches = []
    for key in ("then_branch", "else_branch"):
        try:
            branches.append(import_body(imp, name, "If", _graph_attr(n, key), [], scope))
        except CompileError as e:
            raise CompileError(f"its condition is fed at run time, so both branches are compiled, and its {key} "
                               f"fails: {e}; if the condition is known at compile time, bind the inputs it reads "
                               f"(bind={{...}} / --bind NAME=VALUE)", node=name, op="If") from None
    for b in branches:
        if len(b.outputs) != len(n.output):
            raise CompileError(f"a branch returns {len(b.outputs)} values for {len(n.output)} outputs",
                               node=name, op="If")
    inputs = [n.input[0]]
    for k, out in enumerate(n.output):
        if not out:
            continue
        then, other = (b.tensors[b.outputs[k]] for b in branches)
        if (then.shape, then.dtype) != (other.shape, other.dtype):
            raise CompileError(f"its branches give output {k} different shapes or types ({then.dtype} {then.shape}, "
                               f"{other.dtype} {other.shape}), which are fixed at compile time: make the condition "
                               f"known then (bind the inputs it reads, bind={{...}} / --bind NAME=VALUE)",
                               node=name, op="If")
        bodies = [_body_for(b, [], [b.outputs[k]], inputs) for b in branches]
        imp.emit("If", name if k == 0 else f"{name}.{k}", inputs, [out],
                 {"then": bodies[0], "else": bodies[1], "shape": list(then.shape), "dtype": then.dtype})


def _host_loop(imp, n, name: str, scope: Scope) -> None:
    g, graph = imp.graph, _graph_attr(n, "body")
    ins = list(n.input) + [""] * max(0, 2 - len(n.input))
    state = [g.tensors[t] for t in ins[2:]]
    if len(graph.input) != 2 + len(state):
        raise CompileError(f"its body takes {len(graph.input)} inputs for {len(state)} loop-carried values",
                           node=name, op="Loop")
    formals = [vi.name for vi in graph.input]
    body = import_body(imp, name, "Loop", graph, list(zip(formals, [TensorInfo((), "int64"), TensorInfo((), "bool")]
                                                               + state)), scope)
    n_state = len(state)
    if len(body.outputs) != 1 + n_state + (len(n.output) - n_state) or len(n.output) < n_state:
        raise CompileError(f"its body returns {len(body.outputs)} values for {len(n.output)} outputs and "
                           f"{n_state} loop-carried values", node=name, op="Loop")
    if not ins[0] and not ins[1]:
        raise CompileError("has neither a trip count nor a condition: it would never stop", node=name, op="Loop")
    trips = _static_trips(imp, body, ins, formals[1])
    inputs = ins[:2 + n_state]
    for k, out in enumerate(n.output):
        if not out:
            continue
        res = body.tensors[body.outputs[1 + k]]
        if k < n_state:
            if (res.shape, res.dtype) != (state[k].shape, state[k].dtype):
                raise CompileError(f"loop-carried value {k} changes from {state[k].dtype} {state[k].shape} to "
                                   f"{res.dtype} {res.shape} in the body; shapes are fixed at compile time",
                                   node=name, op="Loop")
            shape = state[k].shape
        elif trips is None:
            raise CompileError(f"its scan output {out!r} has as many rows as the loop runs, which depends on "
                               f"values fed at run time: make the trip count a constant (and the condition "
                               f"one, or absent)", node=name, op="Loop")
        else:
            shape = (trips,) + res.shape
        outs = body.outputs[:1 + n_state] + ([body.outputs[1 + k]] if k >= n_state else [])
        attrs = dict(body=_body_for(body, formals, outs, inputs), n_state=n_state, out=k, shape=list(shape),
                     dtype=res.dtype)
        imp.emit("Loop", name if k == 0 else f"{name}.{k}", inputs, [out], attrs)


def _static_trips(imp, body: Imported, ins: list[str], cond_in: str) -> int | None:
    """The number of iterations when it is known at compile time: a constant trip count, and a condition
    that is absent, or true and passed on unchanged (or a constant true) by the body."""
    g = imp.graph
    if not ins[0] or ins[0] not in g.consts:
        return None
    trips = max(int(np.asarray(g.consts[ins[0]]).reshape(-1)[0]), 0)
    if not ins[1]:
        return trips
    if ins[1] not in g.consts or not bool(np.asarray(g.consts[ins[1]]).reshape(-1)[0]):
        return None if ins[1] not in g.consts else 0
    out, producers = body.outputs[0], {o: m for m in body.nodes for o in m.outputs}
    while out in producers and producers[out].op == "Identity":
        out = producers[out].inputs[0]
    if out == cond_in:
        return trips
    src = body.outer.get(out)
    if src is not None and src in g.consts and bool(np.asarray(g.consts[src]).reshape(-1)[0]):
        return trips
    return None


def _host_scan(imp, n, name: str, scope: Scope) -> None:
    if imp.opset < 9:
        raise CompileError("Scan before opset 9 (with sequence_lens) is not supported; use opset 9 or newer",
                           node=name, op="Scan")
    g, graph = imp.graph, _graph_attr(n, "body")
    at = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute if a.name != "body"}
    n_scan = int(at["num_scan_inputs"])
    n_state = len(n.input) - n_scan
    if n_scan < 1 or n_state < 0 or len(graph.input) != len(n.input):
        raise CompileError(f"num_scan_inputs {n_scan} does not fit {len(n.input)} inputs and a body of "
                           f"{len(graph.input)}", node=name, op="Scan")
    xs = [g.tensors[t] for t in n.input[n_state:]]
    in_axes = [int(a) % len(x.shape) if x.shape else 0 for a, x in
               zip(at.get("scan_input_axes", [0] * n_scan), xs)]
    in_dirs = [int(d) for d in at.get("scan_input_directions", [0] * n_scan)]
    steps = {x.shape[ax] for x, ax in zip(xs, in_axes) if x.shape}
    if len(steps) != 1 or any(not x.shape for x in xs):
        raise CompileError(f"its scan inputs {[x.shape for x in xs]} do not share one length along their axes "
                           f"{in_axes}", node=name, op="Scan")
    length = steps.pop()
    formals = [vi.name for vi in graph.input]
    infos = [g.tensors[t] for t in n.input[:n_state]] + \
        [TensorInfo(x.shape[:ax] + x.shape[ax + 1:], x.dtype) for x, ax in zip(xs, in_axes)]
    body = import_body(imp, name, "Scan", graph, list(zip(formals, infos)), scope)
    n_out_scan = len(n.output) - n_state
    out_axes, out_dirs = list(at.get("scan_output_axes", [0] * n_out_scan)), list(at.get("scan_output_directions",
                                                                                         [0] * n_out_scan))
    inputs = list(n.input)
    for k, out in enumerate(n.output):
        if not out:
            continue
        res = body.tensors[body.outputs[k]]
        if k < n_state:
            if (res.shape, res.dtype) != (infos[k].shape, infos[k].dtype):
                raise CompileError(f"state {k} changes from {infos[k].dtype} {infos[k].shape} to {res.dtype} "
                                   f"{res.shape} in the body", node=name, op="Scan")
            shape, axis, rev = res.shape, 0, 0
        else:
            axis = int(out_axes[k - n_state]) % (len(res.shape) + 1)
            rev = int(out_dirs[k - n_state])
            shape = res.shape[:axis] + (length,) + res.shape[axis:]
        outs = body.outputs[:n_state] + ([body.outputs[k]] if k >= n_state else [])
        attrs = dict(body=_body_for(body, formals, outs, inputs), n_state=n_state, out=k, in_axes=in_axes,
                     in_dirs=in_dirs, out_axis=axis, out_dir=rev, shape=list(shape), dtype=res.dtype)
        imp.emit("Scan", name if k == 0 else f"{name}.{k}", inputs, [out], attrs)
