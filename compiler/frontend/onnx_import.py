"""ONNX (opsets 7 to the newest onnx defines, IR 3 and up) -> graph IR, attributes normalised, shapes inferred.

Each op's import (its attribute normalisation per ONNX version: Clip bounds and Pad
amounts that moved from attributes to inputs, Softmax's pre-13 axis semantics,
auto_pad, Reshape's 0/-1 entries, Squeeze/Unsqueeze axes) is its registry
definition's `convert` (`ops/`).  Any node whose inputs are all constants (shape
arithmetic: Shape, Gather, Slice, Concat, ConstantOfShape, Range, Cast, ...) is
evaluated here, before its op is judged, and a Shape of a tensor with a static shape
is a constant; so shape chains fold away.  An op no family defines but onnx.reference
implements runs generically on the host.  Ops nothing implements (other domains,
unknown names) stop the compile before any work, listing every one.  onnx.checker's
complaints are a warning, not a gate; a model is hostile until shown otherwise: its file and
external data are read only from its folder and within bounds (`onnx_files`), every tensor it
declares, holds or folds to is capped before it is allocated (`limits`), and every node's input
types follow its ONNX schema, as onnxruntime requires (`onnx_types`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnx
import onnx.numpy_helper as nh
from google.protobuf.message import DecodeError

from vtakit.errors import CompileError
from vtakit.compiler.ops.registry import contiguous
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops import IMPORTS, ONNX_PRECISION, OPS, Precision, onnx_def
from vtakit.compiler.ops.onnx_reference import NONDETERMINISTIC, attrs_to_ir, convert_generic, evaluate, implemented
from vtakit.compiler.frontend import control_flow
from vtakit.compiler.frontend.bound import bound_inputs, bound_value
from vtakit.compiler.frontend.limits import Budget, check_fold, check_live_activations, check_tensor, tensor_cost
from vtakit.compiler.frontend.onnx_files import check_and_load, read_model_file
from vtakit.compiler.frontend.onnx_types import NATIVE_DTYPES, check_declared_type, check_node_types, onnx_dtype, output_types
from vtakit.compiler.ops.shapes import infer
from vtakit.compiler.ops.quant import fold_dequantize


def _onnx_opset_max() -> int:
    return int(onnx.defs.onnx_opset_version())


OPSETS = range(7, _onnx_opset_max() + 1)
"""Default-domain opsets taken: 7 to the newest the installed onnx defines."""
SUPPORTED = ("Constant",) + tuple(IMPORTS)
"""ONNX op types the op families define (any other op onnx.reference implements is taken too, generically)."""
PRECISION: dict[str, Precision] = dict(ONNX_PRECISION)
PRECISION.update({name: d.precision for name, d in OPS.items() if d.precision is not None})
"""The precision class of every op the families define, by op name (ONNX ops and the IR's Dense, ...),
from the registry (`ops/`, each `OpDef.precision`): precision-neutral ops move or select values (layout,
relu/clip's bounds, max pooling) and commute with power-of-two rounding, int8-capable ones are the
arithmetic the accelerator exists for (conv, dense, same-shape add), float-only ones have no int8 form
(softmax, averaging, a free-standing Mul, batch norm, QDQ arithmetic and every generic op).
`quant.precision.precision_plan` reads it through `ops.precision_of`; `Constant` is absent: it becomes a
constant, not a node."""
FOLD_LIMIT = 1 << 27  # never materialise a folded constant bigger than this many elements at import


def load_model(source):
    """An onnx.ModelProto from a path, bytes or a ModelProto; unreadable files are one CompileError,
    and what onnx.checker dislikes is a warning (onnxruntime runs many such models).  A path's
    external data is read from the model's folder and moved into the model (`onnx_files`), within
    the limits (`limits`); bytes or a ModelProto come without a folder, so they may have none."""
    folder = None
    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        if isinstance(source, (bytes, bytearray)):
            data, shown = bytes(source), "ONNX bytes"
        elif not isinstance(source, (str, os.PathLike)):  # an int would be read as a file descriptor
            raise CompileError(f"a model is an ONNX file path, bytes or an onnx.ModelProto, not {type(source).__name__}")
        else:
            data, shown, folder = read_model_file(source), str(source), Path(source).parent
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise CompileError(f"{shown}: not a valid ONNX file ({type(e).__name__}: {str(e)[:200]})") from None
    check_and_load(model, folder)
    if not model.graph.node:
        raise CompileError("ONNX model has no nodes (empty or truncated file)")
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises ValidationError or C++-bound errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if not model.opset_import or not model.graph.output:
            raise CompileError(f"malformed ONNX model: {first}") from None
        warnings.warn(f"onnx.checker: {first}", stacklevel=3)
    return model


def _opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            if 1 <= imp.version < OPSETS.start:
                return _lift(model, imp.version)
            if imp.version not in OPSETS:
                raise CompileError(f"ONNX opset {imp.version} is not supported (use {OPSETS.start}-{OPSETS.stop - 1})")
            return imp.version
    raise CompileError("ONNX model imports no default-domain opset")


def _lift(model, version: int) -> int:
    """An opset below 7 imports as 7 when every op the model uses has the same definition (schema
    version) at both, so nothing it means changes; else one error naming the ops that changed."""
    changed = set()
    for n in model.graph.node:
        if n.domain in ("", "ai.onnx"):
            try:
                same = onnx.defs.get_schema(n.op_type, version).since_version == \
                    onnx.defs.get_schema(n.op_type, OPSETS.start).since_version
            except onnx.defs.SchemaError:
                same = False
            if not same:
                changed.add(n.op_type)
    if changed:
        raise CompileError(f"ONNX opset {version} is not supported: {', '.join(sorted(changed))} changed by opset "
                           f"{OPSETS.start} (use {OPSETS.start}-{OPSETS.stop - 1})")
    return OPSETS.start


def _check_ops(model) -> None:
    bad: dict[str, list[str]] = {}

    def check(graph) -> None:  # control-flow bodies too
        for i, n in enumerate(graph.node):
            if n.domain not in ("", "ai.onnx") or (n.op_type != "Constant" and onnx_def(n.op_type) is None):
                bad.setdefault(f"{n.domain + '.' if n.domain else ''}{n.op_type}", []).append(n.name or f"#{i}")
            for sub in control_flow.subgraphs(n):
                check(sub)

    check(model.graph)
    if bad:
        listed = "; ".join(f"{op} ({', '.join(names)})" for op, names in sorted(bad.items()))
        raise CompileError(f"unsupported ONNX ops: {listed}")


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class NeedsConstant(CompileError):
    """An op's import needs an input to be a constant and the model feeds it at run time."""


class _Importer:
    """One model's import: the state the op definitions' `convert` functions use (graph, opset,
    `emit`, `const_input`)."""

    def __init__(self, model, input_shapes: dict[str, tuple[int, ...]] | None,
                 bind: dict[str, tuple[int, ...]] | None = None, values: Mapping[str, Any] | None = None):
        self.model = model
        self.opset = _opset(model)
        g = model.graph
        self.graph = Graph([], {}, [], [], {}, name=g.name or "model")
        self.budget = Budget()  # every constant's and activation's bytes (limits.py)
        self.names: set[str] = set()
        self.types: dict[str, str] = {}  # ONNX's element type of a node output, where the IR's differs (onnx_types)
        self.taken = control_flow.defined(g)  # value names in use: an inlined branch's own values avoid them
        self.count = 0  # nodes imported (the index in an unnamed node's name)
        for init in g.initializer:  # IR 3 lists these among the inputs too: they stay constants
            try:
                arr = nh.to_array(init)
            except Exception as e:  # data that does not match its dims or type
                raise CompileError(f"initializer {init.name!r} cannot be read: {str(e).strip()[:200]}") from None
            self.budget.take(arr.nbytes, f"initializer {init.name!r}")
            self.graph.consts[init.name] = arr
            self.graph.tensors[init.name] = TensorInfo(arr.shape, arr.dtype.name)
        overrides = dict(input_shapes or {})
        bind = dict(bind or {})
        self.defaulted: list[str] = []
        for vi in bound_inputs(g, self.graph.consts, values, overrides):  # values the user binds: constants
            self.set_const(vi.name, bound_value(vi, values[vi.name]))
        data_inputs = [vi for vi in g.input if vi.name not in self.graph.consts]
        if "" in bind and data_inputs:  # an unnamed sample binds the first input
            bind[data_inputs[0].name] = bind.pop("")
        for vi in g.input:
            if vi.name in self.graph.consts:
                continue
            self.graph.inputs.append(vi.name)
            info = self._input_info(vi, overrides.pop(vi.name, None), bind.get(vi.name))
            check_tensor(f"input {vi.name!r}", info.shape, info.dtype)  # calibration allocates it
            self.budget.take(tensor_cost(info.shape, info.dtype)[1], f"input {vi.name!r}")
            self.graph.tensors[vi.name] = info
        if overrides:
            raise CompileError(f"input_shapes names unknown inputs {sorted(overrides)}; the model's inputs "
                               f"are {self.graph.inputs}")
        self.graph.outputs = [o.name for o in g.output]

    def child(self, name: str, tensors: dict[str, TensorInfo], consts: dict[str, np.ndarray],
              types: dict[str, str]) -> _Importer:
        """An importer for a control-flow body (`control_flow`): this model's opset, limits and node names,
        a graph of its own whose inputs are `tensors` (those in `consts` are known at compile time)."""
        sub = object.__new__(_Importer)
        sub.model, sub.opset, sub.budget, sub.names, sub.count = self.model, self.opset, self.budget, self.names, 0
        sub.types, sub.defaulted = dict(types), []
        sub.graph = Graph([], dict(tensors), [t for t in tensors if t not in consts], [], dict(consts), name=name)
        sub.taken = set(tensors)
        return sub

    def import_body(self, body) -> Graph:
        """A control-flow body's nodes imported into this (child) importer's graph; its outputs checked."""
        self.taken |= control_flow.defined(body)
        for init in body.initializer:
            self.set_const(init.name, nh.to_array(init))
        self.import_nodes(body.node)
        self.graph.outputs = [o.name for o in body.output]
        for o in self.graph.outputs:
            if o not in self.graph.tensors:
                raise CompileError(f"body output {o!r} is never produced", node=self.graph.name)
        return self.graph

    def control_flow(self, n, name: str) -> None:
        """Import an If, Loop or Scan (`control_flow`); an inlined branch's nodes are imported next."""
        self.work.extend(reversed(control_flow.convert(self, n, name, self.scope)))

    def fresh_name(self, base: str) -> str:
        """`base`, or `base_1`, `base_2`...: a value name no other value of this graph has."""
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def _input_info(self, vi, override, bound=None) -> TensorInfo:
        """Static dims as given; a symbolic first (batch) dim bound by `override`, by the first calibration
        sample (`bound`) or else 1 (noted in `defaulted`); other symbolic dims need `override`."""
        tt = vi.type.tensor_type
        dtype = onnx_dtype(tt.elem_type)
        if dtype is None:
            raise CompileError(f"input {vi.name!r} has element type {tt.elem_type}; a tensor of numbers, bools "
                               f"or strings expected")
        dims, symbolic = [], []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(1)
                symbolic.append((i, d.dim_param or (str(d.dim_value) if d.dim_value < 0 else "?")))  # -1: Paddle's dynamic
        fixed = [i for i, d in enumerate(tt.shape.dim) if d.HasField("dim_value") and d.dim_value > 0]
        given = override if override is not None else (bound if symbolic else None)
        if not tt.HasField("shape"):  # rank unknown: the shape must be given
            if given is None:
                raise CompileError(f"input {vi.name!r} has no shape in the model: give it (input_shapes / "
                                   f"--input-shape {vi.name}=...)")
            return TensorInfo(tuple(int(s) for s in given), dtype)
        if given is not None:
            given = tuple(int(s) for s in given)
            what = f"input_shapes[{vi.name!r}]" if override is not None else \
                f"the first calibration sample for {vi.name!r}"
            if len(given) != len(dims):
                raise CompileError(f"{what} = {given} does not match the model's rank {len(dims)}")
            if any(s < 0 for s in given):
                raise CompileError(f"{what} = {given} has a negative dimension")
            if any(given[i] != dims[i] for i in fixed):
                raise CompileError(f"{what} = {given} contradicts the model's shape {tuple(dims)}")
            return TensorInfo(given, dtype)
        if any(i != 0 for i, _ in symbolic):
            names = ", ".join(p for i, p in symbolic if i != 0)
            raise CompileError(f"input {vi.name!r} has symbolic dimensions ({names}) beyond the batch: give its "
                               f"shape (input_shapes / --input-shape {vi.name}=...)")
        self.defaulted += [f"{vi.name}:{p}" for _, p in symbolic]
        return TensorInfo(tuple(dims), dtype)

    # ---------------------------------------------------------------- nodes
    def onnx_type(self, tensor: str) -> str:
        """A tensor's element type as ONNX (and onnxruntime) sees it."""
        return self.types.get(tensor) or self.graph.tensors[tensor].dtype

    def node_name(self, n, index: int) -> str:
        base = n.name or f"{n.op_type}_{index}"
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def emit(self, op: str, name: str, inputs: list[str], outputs: list[str], attrs: dict) -> None:
        node = Node(op, name, inputs, outputs, attrs)
        for i in inputs:
            if i and i not in self.graph.tensors:
                raise CompileError(f"reads {i!r}, which no earlier node produces", node=name, op=op)
        for out, info in zip(outputs, infer(node, self.graph)):
            check_tensor(f"output {out!r}", info.shape, info.dtype, node=name, op=op)
            self.graph.tensors[out] = info
        self.graph.nodes.append(node)

    def const_input(self, n, name: str, idx: int, what: str):
        if idx >= len(n.input) or not n.input[idx]:
            return None
        if n.input[idx] not in self.graph.consts:
            raise NeedsConstant(f"{what} must be a constant initializer", node=name, op=n.op_type)
        return self.graph.consts[n.input[idx]]

    def set_const(self, name: str, value: np.ndarray, node: str | None = None, op: str | None = None) -> None:
        check_tensor(f"constant {name!r}", value.shape, value.dtype.name, node=node, op=op)
        self.budget.take(value.nbytes, f"constant {name!r}", node=node, op=op)
        value = contiguous(value)
        self.graph.consts[name] = value
        self.graph.tensors[name] = TensorInfo(tuple(int(s) for s in value.shape), value.dtype.name)

    def import_nodes(self, nodes) -> None:
        """Import `nodes` in order.  An If known at compile time puts its branch's nodes in its place, each
        with the scope that names the branch's values in this graph (`control_flow`)."""
        self.work: list = [(n, None) for n in reversed(list(nodes))]
        while self.work:
            n, self.scope = self.work.pop()
            if self.scope:
                n = control_flow.renamed(n, self.scope)
            name = self.node_name(n, self.count)
            self.count += 1
            try:
                if n.op_type in control_flow.OPS and n.domain in ("", "ai.onnx"):
                    onnx_def(n.op_type).convert(self, n, name, {})  # never folded: its bodies are its own
                    continue
                if not self.fold(n, name):
                    self.convert(n, name, _attrs(n))
                self.types.update(output_types(n, self.opset, self.onnx_type))
            except CompileError:
                raise
            except (KeyError, ValueError, IndexError, TypeError, AttributeError, ArithmeticError) as e:
                raise CompileError(f"bad attributes or inputs ({type(e).__name__}: {e})", node=name,
                                   op=n.op_type) from None

    def run(self) -> Graph:
        self.import_nodes(self.model.graph.node)
        for o in self.graph.outputs:
            if o not in self.graph.tensors:
                raise CompileError(f"graph output {o!r} is never produced")
        check_live_activations(self.graph, self.budget)
        for vi in self.model.graph.output:  # where ONNX's own type is known (not only the IR's compute type)
            if vi.name in self.types or vi.name in self.graph.consts or vi.name in self.graph.inputs:
                check_declared_type(vi, self.onnx_type(vi.name))
        return self.graph

    def fold(self, n, name: str) -> bool:
        """Evaluate a node now when its value is known at compile time: every input constant, or a
        Shape/Size of a tensor whose shape is static (always, here)."""
        g, op = self.graph, n.op_type
        ins = list(n.input)
        for i in ins:
            if i and i not in g.tensors:
                raise CompileError(f"reads {i!r}, which no earlier node produces", node=name, op=op)
        check_node_types(n, self.opset, self.onnx_type, name)
        if op in ("Shape", "Size") and ins and ins[0] in g.tensors:
            shape = g.tensors[ins[0]].shape
            if op == "Size":
                self.set_const(n.output[0], np.array(int(np.prod(shape, dtype=np.int64)), np.int64))
                return True
            at = _attrs(n)
            start, end = int(at.get("start", 0)), at.get("end")
            self.set_const(n.output[0], np.array(shape[start:None if end is None else int(end)], np.int64))
            return True
        if op == "Constant" or op in NONDETERMINISTIC or not any(ins) or \
                not all(not i or i in g.consts for i in ins):
            return False
        if op == "ConstantOfShape" or sum(g.consts[i].size for i in ins if i) > FOLD_LIMIT:
            if op != "ConstantOfShape" or int(np.prod(g.consts[ins[0]], dtype=np.int64)) > FOLD_LIMIT:
                return False
        if op == "DequantizeLinear" and fold_dequantize(self, n, name):  # keeps the scales (qdq.py)
            return True
        attrs = attrs_to_ir(n)
        check_fold(n, name, attrs, g, self.opset, self.budget)
        try:
            values = evaluate(op, attrs, self.opset, [g.consts[i] if i else None for i in ins],
                              len(n.output))
        except CompileError:
            raise
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CompileError(f"cannot evaluate on its constant inputs: {first}", node=name, op=op) from None
        for out, v in zip(n.output, values):
            if out:
                self.set_const(out, v, node=name, op=op)
        return True

    def convert(self, n, name: str, at: dict) -> None:
        """The op's own import; where that needs a constant the model feeds at run time (a Clip bound,
        a quantization scale), the op runs generically when its output shape is still static; so does
        a node reading an element type the host code does not compute in (`NATIVE_DTYPES`)."""
        if n.op_type == "Constant":
            self.set_const(n.output[0], _constant_value(n, name, at))
            return
        takes = onnx_def(n.op_type).dtypes or NATIVE_DTYPES
        if any(i and self.graph.tensors[i].dtype not in takes for i in n.input) and implemented(n.op_type, self.opset):
            convert_generic(self, n, name, at)
            return
        try:
            onnx_def(n.op_type).convert(self, n, name, at)
        except NeedsConstant:
            if not implemented(n.op_type) or not convert_generic(self, n, name, at, static_only=True):
                raise


def _constant_value(n, name: str, at: dict) -> np.ndarray:
    """A Constant node's value (tensor, or since opset 12 a scalar/list attribute)."""
    if "value" in at:
        return nh.to_array(at["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in at:
            return np.array(at[key], dtype)
    raise CompileError("only tensor- and number-valued Constant nodes are supported", node=name, op="Constant")


def import_onnx(source, input_shapes: dict[str, tuple[int, ...]] | None = None,
                bind: dict[str, tuple[int, ...]] | None = None, values: Mapping[str, Any] | None = None) -> Graph:
    """Load, check and convert an ONNX model (path, bytes or ModelProto) into a typed Graph.

    Symbolic dimensions take their sizes from `input_shapes`, else from `bind` (the first calibration
    sample's shapes, every dimension of the inputs it names); a symbolic batch dimension left over is 1,
    and `graph.notes["defaulted_dims"]` lists which were defaulted so callers can say so.  `values` binds
    inputs to values known at compile time (a sample rate): each becomes a constant, so an If on it is
    inlined, and leaves the graph's inputs."""
    model = load_model(source)
    _check_ops(model)
    imp = _Importer(model, input_shapes, bind, values)
    graph = imp.run()
    graph.notes.update(defaulted_dims=imp.defaulted, opset=imp.opset)
    return graph
