"""Graph IR: typed tensors and nodes in topological order, the network compiler's common currency.

A `Graph` is what the ONNX frontend produces and every graph pass consumes and
returns.  It is deliberately small: nodes carry an op name, tensor names and a
dict of normalised attributes (the frontend resolves ONNX defaults and
opset differences once, so passes never look at opset versions); constants live
in `consts` as numpy arrays; every tensor has a `TensorInfo` with its static
shape and dtype, and after quantization the power-of-two exponent of its scale
(value = integer * 2**-exp).
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from vtakit.compiler.gc_budget import fewer_collections
from vtakit.errors import CompileError


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name: float32, int8, int32, int64, uint8
    exp: int | None = None  # quantized tensors: real value = stored integer * 2**-exp

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"{self.op}({self.name}: {', '.join(self.inputs)} -> {', '.join(self.outputs)})"


def _copy_attr(v: Any) -> Any:
    """A deep copy of an attribute value, without `copy.deepcopy`'s per-object bookkeeping (which made
    `Graph.copy` the costliest step of compiling a long chain): passes may edit a copy's lists, dicts
    and arrays in place."""
    if v is None or isinstance(v, (str, int, float, bool, np.generic)):
        return v
    if type(v) is tuple:
        return tuple(_copy_attr(x) for x in v)
    if type(v) is list:
        return [_copy_attr(x) for x in v]
    if type(v) is dict:
        return {k: _copy_attr(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return v.copy()
    return copy.deepcopy(v)


def resolve(renames: dict[str, str], name: str) -> str:
    """Where `name` ends up after following `renames` (a -> b, b -> c: a ends up c)."""
    seen = {name}
    while name in renames and renames[name] not in seen:
        name = renames[name]
        seen.add(name)
    return name


def copy_node(n: Node) -> Node:
    """A node whose inputs, outputs and attributes can be changed without touching `n`."""
    return Node(n.op, n.name, list(n.inputs), list(n.outputs), {k: _copy_attr(v) for k, v in n.attrs.items()})


class NodeList(list):
    """A graph's node list that indexes its node names and outputs, so that `Graph.fresh_name` and
    `Graph.producer` cost O(1) instead of a walk over every node (quadratic in passes that ask once per
    node).  Appends keep both indexes, inserts and removes the names; any other edit drops them and the
    next question builds them again.  Node names and outputs are not reassigned in place while a graph
    is asked (a rewrite that moves an output, fold's, does so on its own copy and asks nothing first)."""

    _names: dict[str, int] | None = None
    _producers: dict[str, Node] | None = None

    def __getstate__(self) -> None:
        return None  # the indexes are rebuilt where needed, not pickled or deep-copied

    def producer_index(self) -> dict[str, Node]:
        """Tensor -> the node producing it (the last one, were there two); not to be edited."""
        if self._producers is None:
            self._producers = {out: n for n in self for out in n.outputs}
        return self._producers

    def names(self) -> dict[str, int]:
        """Node name -> how many nodes carry it."""
        if self._names is None:
            self._names = {}
            for n in self:
                self._names[n.name] = self._names.get(n.name, 0) + 1
        return self._names

    def _count(self, node: Node, k: int) -> None:
        if self._names is not None:
            left = self._names.get(node.name, 0) + k
            if left:
                self._names[node.name] = left
            else:
                self._names.pop(node.name, None)

    def append(self, node: Node) -> None:
        super().append(node)
        self._count(node, 1)
        if self._producers is not None:
            self._producers.update((out, node) for out in node.outputs)

    def insert(self, index, node: Node) -> None:
        super().insert(index, node)
        self._count(node, 1)
        self._producers = None

    def extend(self, nodes) -> None:
        for n in list(nodes):
            self.append(n)

    def remove(self, node: Node) -> None:
        super().remove(node)
        self._count(node, -1)
        self._producers = None

    def _forget(self) -> None:
        self._names = self._producers = None

    def __setitem__(self, index, value) -> None:
        super().__setitem__(index, value)
        self._forget()

    def __delitem__(self, index) -> None:
        super().__delitem__(index)
        self._forget()

    def __iadd__(self, nodes):
        self.extend(nodes)
        return self

    def __imul__(self, k):
        self._forget()
        return super().__imul__(k)

    def pop(self, index=-1) -> Node:
        self._forget()
        return super().pop(index)

    def clear(self) -> None:
        self._forget()
        super().clear()

    def sort(self, *args, **kwargs) -> None:
        self._forget()
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self._forget()
        super().reverse()


@dataclass
class Graph:
    nodes: list[Node]
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "graph"
    notes: dict[str, Any] = field(default_factory=dict)

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "nodes" and type(value) is not NodeList:  # any list assigned keeps its names counted
            value = NodeList(value)
        super().__setattr__(key, value)

    # ------------------------------------------------------------ queries
    def copy(self) -> "Graph":
        """A copy whose nodes and dicts can be changed freely (constant arrays are shared, never mutated).

        The cyclic garbage collector pauses meanwhile: the copy makes four objects per node, none in a
        cycle, and the collections they would trigger scan the whole heap (most of a long chain's copy)."""
        with fewer_collections():
            nodes = [copy_node(n) for n in self.nodes]
        return Graph(nodes, dict(self.tensors), list(self.inputs), list(self.outputs), dict(self.consts),
                     self.name, dict(self.notes))

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str, what: str, node: Node) -> np.ndarray:
        """The constant value of an input, or a CompileError saying the compiler needs it constant."""
        if name not in self.consts:
            raise CompileError(f"{what} ({name!r}) must be a constant", node=node.name, op=node.op)
        return self.consts[name]

    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs}

    def producer(self, tensor: str) -> Node | None:
        """The node producing `tensor` (None: a graph input or constant), in O(1) (`NodeList`)."""
        return self.nodes.producer_index().get(tensor)

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    users.setdefault(i, []).append(n)
        return users

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def info(self, name: str) -> TensorInfo:
        return self.tensors[name]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    # ------------------------------------------------------------ edits
    def fresh_name(self, base: str) -> str:
        """A tensor or node name not used yet."""
        nodes = self.nodes.names()

        def taken(name: str) -> bool:
            return name in self.tensors or name in nodes or name in self.consts

        if not taken(base):
            return base
        k = 1
        while taken(f"{base}_{k}"):
            k += 1
        return f"{base}_{k}"

    def add_const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh_name(base)
        value = np.ascontiguousarray(value)
        self.consts[name] = value
        self.tensors[name] = TensorInfo(tuple(value.shape), value.dtype.name)
        return name

    def replace_uses(self, old: str, new: str) -> None:
        """Every reader of `old` (nodes and graph outputs) reads `new` instead (one walk over the graph:
        a pass with many replacements collects them for `rename_uses`)."""
        self.rename_uses({old: new})

    def rename_uses(self, renames: dict[str, str]) -> None:
        """Every reader of a tensor in `renames` (nodes and graph outputs) reads its new name instead, in
        one walk over the graph; chains (a -> b, b -> c) resolve to their end."""
        if not renames:
            return
        final = {old: resolve(renames, old) for old in renames}
        for n in self.nodes:
            if any(i in final for i in n.inputs):
                n.inputs = [final.get(i, i) for i in n.inputs]
        self.outputs = [final.get(o, o) for o in self.outputs]

    def prune(self) -> None:
        """Drop tensor infos and constants nobody refers to any more."""
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i)
            used.update(n.outputs)
        self.tensors = {k: v for k, v in self.tensors.items() if k in used}
        self.consts = {k: v for k, v in self.consts.items() if k in used}

    def toposort(self) -> None:
        """Order nodes so every input is produced before it is read (stable for an ordered graph).

        The order is that of sweeping the list again and again, taking each node whose inputs are
        ready, but found in one walk (sweeping was quadratic on a list in reverse order): a node's
        sweep is its latest input's, one later where that input's producer comes after it in the list,
        and nodes leave a heap in (sweep, position) order."""
        ready: dict[str, tuple[int, int]] = {t: (0, -1) for t in (*self.inputs, *self.consts, "")}
        readers: dict[str, list[int]] = {}
        waiting = []
        for k, n in enumerate(self.nodes):
            missing = {i for i in n.inputs if i not in ready}
            waiting.append(len(missing))
            for i in missing:
                readers.setdefault(i, []).append(k)

        def sweep(k: int) -> int:
            return max((s + (at > k) for s, at in (ready[i] for i in self.nodes[k].inputs)), default=0)

        heap = [(0, k) for k, w in enumerate(waiting) if w == 0]
        order: list[int] = []
        while heap:
            s, k = heapq.heappop(heap)
            order.append(k)
            for out in self.nodes[k].outputs:
                if out in ready:
                    continue
                ready[out] = (s, k)
                for r in readers.get(out, ()):
                    waiting[r] -= 1
                    if waiting[r] == 0:
                        heapq.heappush(heap, (sweep(r), r))
        if len(order) < len(self.nodes):
            placed = set(order)
            rest = [n for k, n in enumerate(self.nodes) if k not in placed]
            missing = sorted({i for n in rest for i in n.inputs if i not in ready})
            raise CompileError(f"graph has a cycle or reads undefined tensors {missing[:5]}",
                               node=rest[0].name, op=rest[0].op)
        self.nodes = [self.nodes[k] for k in order]

    def validate(self) -> None:
        """Every tensor read is defined and typed, names are unique: the invariant passes keep."""
        defined = set(self.inputs) | set(self.consts) | {""}
        names = set()
        for n in self.nodes:
            if n.name in names:
                raise CompileError("duplicate node name", node=n.name, op=n.op)
            names.add(n.name)
            for i in n.inputs:
                if i not in defined:
                    raise CompileError(f"reads {i!r} before it is produced", node=n.name, op=n.op)
            for o in n.outputs:
                if o in defined and o:
                    raise CompileError(f"tensor {o!r} is produced twice", node=n.name, op=n.op)
                if o not in self.tensors:
                    raise CompileError(f"output {o!r} has no type", node=n.name, op=n.op)
                defined.add(o)
        for o in self.outputs:
            if o not in defined:
                raise CompileError(f"graph output {o!r} is never produced")

    def summary(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.op_counts().items()))
        return f"{self.name}: {len(self.nodes)} nodes ({counts})"
