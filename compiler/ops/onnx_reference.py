"""The generic definition: any default-domain ONNX op that `onnx.reference` implements runs on
the host through it (correct, slow), so a valid model never fails to compile for want of a kernel.

The IR node keeps the op's ONNX name, its ONNX attributes (JSON-safe, see `attrs_to_ir`), the
model's opset (the reference picks the op version from it, so every version's semantics come
for free) and which of the ONNX node's outputs it computes (a multi-output node becomes one IR
node per output read).  Shapes come from onnx.shape_inference on the single node, or, when that
leaves a dimension unknown, from running it on zeros of the input shapes.

Nothing it returns is trusted unchecked: at compile time every generic node runs once on zeros of its
input shapes (constants as themselves) and what it returns must have the shape and element type ONNX's
shape inference declares; a mismatch is a CompileError naming the node (onnx 1.22's GlobalMaxPool returned
(N, 1) for an (N, C, L) input).  Ops whose reference implementation is wrong in some form have kernels of
our own (`correct`), used wherever the op is evaluated generically, folding at import included."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from vtakit.errors import CompileError, needs_full_install, pc_side_missing
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.registry import contiguous, IMPORTS, OPS, OpDef, Precision, register, set_generic

_NO_ONNX = ""  # a board's runtime has no onnx: `correct`ed ops still run, the rest say they need it
try:
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.ops import load_op
except ImportError as missing:
    _NO_ONNX = pc_side_missing(missing)

GENERIC = ".generic"  # IR name suffix: an op with its own definition, run generically for one node
NONDETERMINISTIC = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
                    "Multinomial")


CORRECTED: dict[str, Callable[[dict, list], list[np.ndarray]]] = {}
"""ONNX op -> our kernel (ONNX attributes by name, the inputs -> every output), for ops onnx.reference gets
wrong in some form (`correct`)."""


def correct(op_type: str, kernel: Callable[[dict, list], list[np.ndarray]]) -> None:
    """Evaluate `op_type` with `kernel` instead of onnx.reference wherever it runs generically."""
    CORRECTED[op_type] = kernel


def implemented(op_type: str, opset: int | None = None) -> bool:
    """Whether onnx.reference has the op (in the default domain); without onnx (a board), assumed: the
    module was compiled where it was checked, and running the op says it needs onnx."""
    if _NO_ONNX:
        return True
    try:
        load_op("", op_type, opset)
    except RuntimeError:  # NotImplementedError (a RuntimeError) for ops or versions it does not implement
        return False
    return True


# ------------------------------------------------------------------------------------ attributes
def attrs_to_ir(node_proto) -> list[list]:
    """ONNX attributes as [name, type, value] triples that survive the module's JSON manifest."""
    A = onnx.AttributeProto
    out = []
    for a in node_proto.attribute:
        if a.type in (A.GRAPH, A.GRAPHS):  # If, Loop and Scan have their own import (frontend/control_flow.py)
            raise CompileError("attributes holding subgraphs are taken only by If, Loop and Scan",
                               node=node_proto.name or None, op=node_proto.op_type)
        if a.type == A.TENSOR and a.t.data_location == onnx.TensorProto.EXTERNAL:  # never resolved against cwd
            raise CompileError(f"attribute {a.name!r} keeps its data in an external file; load the model from its "
                               f"path (onnx_import.load_model moves external data in)",
                               node=node_proto.name or None, op=node_proto.op_type)
        v = onnx.helper.get_attribute_value(a)
        if a.type == A.TENSOR:
            arr = numpy_helper.to_array(v)
            v = dict(tensor=arr.reshape(-1).tolist(), dtype=arr.dtype.name, shape=list(arr.shape))
        elif a.type == A.STRING:
            v = v.decode()
        elif a.type == A.STRINGS:
            v = [s.decode() for s in v]
        elif a.type in (A.INTS, A.FLOATS):
            v = list(v)
        out.append([a.name, int(a.type), v])
    return out


def _attribute(name: str, kind: int, value: Any):
    A = onnx.AttributeProto
    if kind == A.TENSOR:
        arr = np.array(value["tensor"], dtype=value["dtype"]).reshape(value["shape"])
        return onnx.helper.make_attribute(name, numpy_helper.from_array(arr))
    if kind in (A.INTS, A.FLOATS, A.STRINGS):
        value = list(value)
    return onnx.helper.make_attribute(name, value, attr_type=kind)


def onnx_node(op_type: str, attrs: list, n_in: int, n_out: int):
    node = onnx.helper.make_node(op_type, [f"i{i}" for i in range(n_in)], [f"o{i}" for i in range(n_out)])
    node.attribute.extend(_attribute(*a) for a in attrs)
    return node


def _key(attrs) -> str:
    return json.dumps([[a[0], a[1], a[2]] for a in attrs])


@lru_cache(maxsize=512)
def _evaluator(op_type: str, attrs_key: str, opset: int, present: tuple[bool, ...], n_out: int):
    attrs = json.loads(attrs_key)
    node = onnx_node(op_type, attrs, len(present), n_out)
    for i, p in enumerate(present):  # absent optional inputs are empty names
        if not p:
            node.input[i] = ""
    ins = [onnx.helper.make_tensor_value_info(f"i{i}", 0, None) for i, p in enumerate(present) if p]
    outs = [onnx.helper.make_tensor_value_info(f"o{i}", 0, None) for i in range(n_out)]
    graph = onnx.helper.make_graph([node], "op", ins, outs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model)


def evaluate(op_type: str, attrs: list, opset: int, args: list, n_out: int = 1) -> list[np.ndarray]:
    """Every output of one ONNX node on numpy inputs (None for absent optional ones)."""
    if op_type in CORRECTED:
        return CORRECTED[op_type]({a[0]: a[2] for a in attrs}, list(args))[:n_out]
    if _NO_ONNX:
        raise needs_full_install(f"running {op_type} through onnx.reference", _NO_ONNX)
    present = tuple(a is not None for a in args)
    ev = _evaluator(op_type, _key(attrs), opset, present, n_out)
    feeds = {f"i{i}": np.asarray(a) for i, a in enumerate(args) if a is not None}
    return [np.asarray(v) for v in ev.run(None, feeds)]


# -------------------------------------------------------------------------------------- the op
def convert_generic(imp, n, name: str, at: dict, static_only: bool = False) -> bool:
    """One IR node per output read (they share the ONNX attributes).  With `static_only`, only when
    onnx.shape_inference gives every output a static shape (else nothing is emitted: False)."""
    own = OPS.get(n.op_type) or IMPORTS.get(n.op_type)
    op = n.op_type if own is None or own.kernel == "onnx.reference" else n.op_type + GENERIC
    generic_def(op)
    attrs = attrs_to_ir(n)
    outs = list(n.output)
    nodes = [Node(op, name if idx == 0 or not outs[0] else f"{name}.{idx}", list(n.input), [out],
                  dict(onnx=attrs, opset=imp.opset, out=idx, n_out=len(outs)))
             for idx, out in enumerate(outs) if out]
    if static_only and any(static_shape_inference(node, imp.graph) is None for node in nodes):
        return False
    for node in nodes:
        imp.emit(node.op, node.name, node.inputs, node.outputs, node.attrs)
    return True


def _run_generic(node: Node, args: list, k) -> np.ndarray:
    a = node.attrs
    try:
        values = evaluate(node.op.removesuffix(GENERIC), a["onnx"], a["opset"], list(args), a.get("n_out", 1))
    except CompileError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CompileError(f"onnx.reference failed: {first}", node=node.name, op=node.op) from None
    return contiguous(values[a.get("out", 0)])


def static_shape_inference(node: Node, g: Graph) -> TensorInfo | None:
    """onnx.shape_inference on the node alone (constants as initializers); None unless fully static."""
    a = node.attrs
    proto = onnx_node(node.op.removesuffix(GENERIC), a["onnx"], len(node.inputs), a.get("n_out", 1))
    ins, inits = [], []
    for i, t in enumerate(node.inputs):
        if not t:
            proto.input[i] = ""
            continue
        info = g.tensors[t]
        ins.append(onnx.helper.make_tensor_value_info(f"i{i}", onnx.helper.np_dtype_to_tensor_dtype(
            np.dtype(info.dtype)), list(info.shape)))
        if t in g.consts and g.consts[t].size <= 4096:
            inits.append(numpy_helper.from_array(np.asarray(g.consts[t]), f"i{i}"))
    model = onnx.helper.make_model(onnx.helper.make_graph([proto], "op", ins, [], inits),
                                   opset_imports=[onnx.helper.make_opsetid("", a["opset"])])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:
        return None
    want = f"o{a.get('out', 0)}"
    for vi in inferred.graph.value_info:
        if vi.name == want:
            tt = vi.type.tensor_type
            if not tt.HasField("shape") or tt.elem_type == 0:
                return None
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
            if any(d < 0 for d in dims):
                return None
            return TensorInfo(tuple(dims), np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name)
    return None


def _infer_generic(node: Node, g: Graph) -> list[TensorInfo]:
    """The declared output (shape inference), checked by running the node on zeros; where inference leaves
    a dimension unknown, what the run gives, if the values fed at run time cannot change it."""
    info = static_shape_inference(node, g)
    if info is not None and max([info.size] + [g.tensors[t].size for t in node.inputs if t]) > CHECK_LIMIT:
        return [info]  # the frontend's limits judge a tensor this big before anything allocates it
    key = _check_key(node, g)
    if info is not None and _CHECKED.get(key) == info:
        return [info]
    args = [None if not t else g.consts[t] if t in g.consts else
            np.zeros(g.tensors[t].shape, g.tensors[t].dtype) for t in node.inputs]
    try:
        y = _run_generic(node, args, None)
    except CompileError:  # e.g. Range on a zero delta: its shape needs the values
        if info is not None:
            y = _on_counting(node, g)
            if y is None:  # no made-up values run it: the declared shape stands
                return [info]
        else:
            fed = ", ".join(repr(t) for t in node.inputs if t and t not in g.consts)
            raise CompileError(f"its output shape depends on the values of {fed}, which are fed at run time "
                               f"(on zeros it fails): make them constants", node=node.name, op=node.op) from None
    got = TensorInfo(tuple(int(s) for s in y.shape), y.dtype.name)
    if info is None:
        _check_shape_is_static(node, g, y.shape)
        return [got]
    if got != info:
        raise CompileError(f"onnx.reference returns {got.dtype} {got.shape} where ONNX's shape inference declares "
                           f"{info.dtype} {info.shape}: it has no correct kernel for this form", node=node.name,
                           op=node.op)
    if len(_CHECKED) < 4096:
        _CHECKED[key] = info
    return [info]


CHECK_LIMIT = 1 << 26
"""Elements of the largest tensor a compile-time check run makes (more is the frontend's limits' to refuse)."""
_CHECKED: dict[tuple, TensorInfo] = {}
"""Generic nodes already run and found to return their declared output (passes infer shapes again)."""


def _check_key(node: Node, g: Graph) -> tuple:
    """What a generic node's output can depend on at compile time: op, attributes, input types and shapes,
    and the values of its (small) constant inputs."""
    ins = []
    for t in node.inputs:
        if not t:
            ins.append(None)
            continue
        info = g.tensors[t]
        value = g.consts.get(t)
        ins.append((info.shape, info.dtype, None if value is None else
                    np.asarray(value).tobytes() if np.asarray(value).size <= 4096 else id(value)))
    a = node.attrs
    return node.op, _key(a["onnx"]), a["opset"], a.get("out", 0), a.get("n_out", 1), tuple(ins)


def _on_counting(node: Node, g: Graph) -> np.ndarray | None:
    args = [None if not t else g.consts[t] if t in g.consts else
            _counting(g.tensors[t].shape, g.tensors[t].dtype) for t in node.inputs]
    try:
        return _run_generic(node, args, None)
    except CompileError:
        return None


def _counting(shape: tuple[int, ...], dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n) % 97 + 1).reshape(shape).astype(dtype)


def _check_shape_is_static(node: Node, g: Graph, on_zeros: tuple[int, ...]) -> None:
    """Shapes are fixed at compile time, so an op whose output shape follows the values fed at run
    time (NonZero, Unique, Compress, a Slice of fed bounds...) is refused rather than run with the
    shape zeros gave: it is run once more on distinct non-zero values (1, 2, 3, ...), and a different
    shape names the inputs."""
    fed = [t for t in node.inputs if t and t not in g.consts]
    if not fed:
        return
    args = [None if not t else g.consts[t] if t in g.consts else
            _counting(g.tensors[t].shape, g.tensors[t].dtype) for t in node.inputs]
    try:
        y = _run_generic(node, args, None)
    except CompileError:
        return  # not a valid input here: zeros' shape stands
    if tuple(y.shape) != tuple(on_zeros):
        raise CompileError(f"its output shape depends on the values of {', '.join(map(repr, fed))}, which are "
                           f"fed at run time ({tuple(on_zeros)} on zeros, {tuple(y.shape)} on 1, 2, 3...): shapes are "
                           f"fixed at compile time", node=node.name, op=node.op)


def generic_def(op_type: str, precision: Precision = Precision.FLOAT, versions: tuple[int, ...] = (),
                doc: str = "", convert=None) -> OpDef | None:
    """The registered definition for an ONNX op run through onnx.reference (registered on first use);
    `convert` imports some forms of it as other ops (Einsum as MatMul), the rest generically."""
    if op_type in OPS:
        return OPS[op_type]
    base = op_type.removesuffix(GENERIC)
    if not implemented(base):
        return None
    return register(OpDef(op_type, _infer_generic, _run_generic, precision, (op_type,) if base == op_type else (),
                          convert or convert_generic, versions, kernel="onnx.reference", doc=doc))


set_generic(generic_def)
