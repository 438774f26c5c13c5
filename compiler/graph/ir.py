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
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import numpy as np

from vtakit.errors import CompileError


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name: float32, int8, int32, int64, uint8
    exp: int | None = None  # quantized tensors: real value = stored integer * 2**-exp

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def with_(self, **changes) -> "TensorInfo":
        return replace(self, **changes)


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"{self.op}({self.name}: {', '.join(self.inputs)} -> {', '.join(self.outputs)})"


@dataclass
class Graph:
    nodes: list[Node]
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "graph"
    notes: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------ queries
    def copy(self) -> "Graph":
        """A copy whose nodes and dicts can be changed freely (constant arrays are shared, never mutated)."""
        return Graph([copy.deepcopy(n) for n in self.nodes], dict(self.tensors), list(self.inputs),
                     list(self.outputs), dict(self.consts), self.name, dict(self.notes))

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str, what: str, node: Node) -> np.ndarray:
        """The constant value of an input, or a CompileError saying the compiler needs it constant."""
        if name not in self.consts:
            raise CompileError(f"{what} ({name!r}) must be a constant", node=node.name, op=node.op)
        return self.consts[name]

    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs}

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
        taken = set(self.tensors) | {n.name for n in self.nodes} | set(self.consts)
        if base not in taken:
            return base
        k = 1
        while f"{base}_{k}" in taken:
            k += 1
        return f"{base}_{k}"

    def add_const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh_name(base)
        value = np.ascontiguousarray(value)
        self.consts[name] = value
        self.tensors[name] = TensorInfo(tuple(value.shape), value.dtype.name)
        return name

    def replace_uses(self, old: str, new: str) -> None:
        """Every reader of `old` (nodes and graph outputs) reads `new` instead."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def prune(self) -> None:
        """Drop tensor infos and constants nobody refers to any more."""
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i)
            used.update(n.outputs)
        self.tensors = {k: v for k, v in self.tensors.items() if k in used}
        self.consts = {k: v for k, v in self.consts.items() if k in used}

    def toposort(self) -> None:
        """Order nodes so every input is produced before it is read (stable for an ordered graph)."""
        ready = set(self.inputs) | set(self.consts) | {""}
        pending, ordered = list(self.nodes), []
        while pending:
            rest = []
            for n in pending:
                if all(i in ready for i in n.inputs):
                    ordered.append(n)
                    ready.update(n.outputs)
                else:
                    rest.append(n)
            if len(rest) == len(pending):
                missing = sorted({i for n in rest for i in n.inputs if i not in ready})
                raise CompileError(f"graph has a cycle or reads undefined tensors {missing[:5]}",
                                   node=rest[0].name, op=rest[0].op)
            pending = rest
        self.nodes = ordered

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
