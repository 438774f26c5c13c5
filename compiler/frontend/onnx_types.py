"""ONNX's type rules, checked at import as onnxruntime checks them.

numpy promotes freely (`Add(float32, int64)` computes float64), so a model onnxruntime refuses
would compile and run with types nobody declared.  Each node's inputs are checked against its
schema: an input whose formal type is a type parameter (`T`) must have one of the types the
parameter allows, and the inputs sharing a parameter must have the same element type.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnx

from vtakit.errors import CompileError


@lru_cache(maxsize=None)
def _onnx_type_strs() -> dict[str, str]:
    """numpy dtype name -> ONNX type string ("float32" -> "tensor(float)")."""
    out: dict[str, str] = {}
    for elem in onnx.TensorProto.DataType.values():
        try:
            name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name
        except (KeyError, TypeError, ValueError):
            continue
        out.setdefault(name, f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})")
    out["object"] = "tensor(string)"
    return out


@lru_cache(maxsize=4096)
def _formals(op_type: str, opset: int) -> tuple | None:
    """((name, type_str, variadic, homogeneous), ...) and {param: allowed} of the op's schema, or None."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    formals = tuple((p.name, p.type_str, p.option == variadic, p.is_homogeneous) for p in schema.inputs)
    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    return formals, allowed


def check_node_types(node, opset: int, dtype_of, name: str) -> None:
    """Refuse a node whose input element types break its schema's constraints (one CompileError naming
    the node). `dtype_of(tensor name)` gives an input's numpy dtype name."""
    if node.domain not in ("", "ai.onnx"):
        return
    key = (node.op_type, opset, tuple(dtype_of(t) if t else "" for t in node.input))
    if key in _PASSED:
        return
    _check(node, opset, dtype_of, name)
    if len(_PASSED) < 65536:
        _PASSED.add(key)


_PASSED: set[tuple] = set()  # (op, opset, input dtypes) that passed: the check depends on nothing else


def _check(node, opset: int, dtype_of, name: str) -> None:
    found = _formals(node.op_type, opset)
    if found is None or not found[0]:
        return
    formals, allowed = found
    strs = _onnx_type_strs()
    bound: dict[str, tuple[str, str]] = {}  # type param -> (type string, the input that fixed it)
    for idx, tensor in enumerate(node.input):
        if not tensor:
            continue
        if idx < len(formals):
            formal, type_str, variadic, homogeneous = formals[idx]
        elif formals[-1][2]:  # the last formal parameter is variadic
            formal, type_str, variadic, homogeneous = formals[-1]
        else:
            break  # more inputs than the schema has: the op's import names that
        dtype = dtype_of(tensor)
        have = strs.get(dtype)
        if have is None:
            continue  # a type this check cannot name: the op's own code judges it
        if type_str in allowed:
            if have not in allowed[type_str]:
                raise CompileError(f"input {tensor!r} ({formal}) is {dtype}; the schema allows {_list(allowed[type_str])}",
                                   node=name, op=node.op_type)
            if variadic and not homogeneous:
                continue
            first = bound.setdefault(type_str, (have, tensor))
            if first[0] != have:
                raise CompileError(f"inputs {first[1]!r} and {tensor!r} must have the same element type ({type_str}): "
                                   f"{_np_name(first[0])} and {dtype} (onnxruntime refuses the model)",
                                   node=name, op=node.op_type)
        elif type_str.startswith("tensor(") and have != type_str:
            raise CompileError(f"input {tensor!r} ({formal}) is {dtype}; the schema requires {type_str}",
                               node=name, op=node.op_type)


def _np_name(type_str: str) -> str:
    return next((k for k, v in _onnx_type_strs().items() if v == type_str), type_str)


def _list(types: frozenset[str]) -> str:
    return ", ".join(sorted(_np_name(t) for t in types if t.startswith("tensor(")))


def output_types(node, opset: int, dtype_of) -> dict[str, str]:
    """The element types ONNX gives a node's outputs (numpy dtype names), from its schema's inference on
    the inputs' types; {} where that cannot tell.  The IR's own dtypes can differ (a MatMul of int32
    computes in float32 here), so the checks of later nodes read these."""
    if node.domain not in ("", "ai.onnx"):
        return {}
    dtypes = tuple(dtype_of(t) if t else "" for t in node.input)
    attrs = tuple(a.SerializeToString() for a in node.attribute)
    types = _inferred(node.op_type, opset, dtypes, attrs, len(node.output))
    return {name: t for name, t in zip(node.output, types) if name and t}


@lru_cache(maxsize=8192)
def _inferred(op_type: str, opset: int, dtypes: tuple[str, ...], attrs: tuple[bytes, ...],
              n_out: int) -> tuple[str | None, ...]:
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return ()
    codes, names = _codes()
    node = onnx.helper.make_node(op_type, [f"i{k}" if d else "" for k, d in enumerate(dtypes)],
                                 [f"o{k}" for k in range(n_out)])
    for blob in attrs:
        node.attribute.add().ParseFromString(blob)
    types = {}
    for k, d in enumerate(dtypes):
        if d:
            if d not in codes:
                return ()
            types[f"i{k}"] = onnx.helper.make_tensor_type_proto(codes[d], None)
    try:
        inferred = onnx.shape_inference.infer_node_outputs(schema, node, types)
    except Exception:  # inference errors of every kind: the op's own import judges the node
        return ()
    out = []
    for k in range(n_out):
        tp = inferred.get(f"o{k}")
        out.append(names.get(tp.tensor_type.elem_type) if tp is not None and tp.HasField("tensor_type") else None)
    return tuple(out)


@lru_cache(maxsize=None)
def _codes() -> tuple[dict[str, int], dict[int, str]]:
    """numpy dtype name <-> ONNX element type code, for the types `_onnx_type_strs` names."""
    by_str = {f"tensor({onnx.TensorProto.DataType.Name(e).lower()})": e for e in onnx.TensorProto.DataType.values()}
    codes = {name: by_str[s] for name, s in _onnx_type_strs().items() if s in by_str}
    return codes, {c: name for name, c in codes.items()}


def check_declared_type(value_info, computed: str) -> None:
    """A graph output declared with one element type and computed with another (onnxruntime refuses
    the model; here the caller would get a type the model does not promise)."""
    declared = value_info.type.tensor_type.elem_type if value_info.type.HasField("tensor_type") else 0
    codes, names = _codes()
    if declared and computed in codes and codes[computed] != declared:
        shown = names.get(declared, f"element type {declared}")
        raise CompileError(f"graph output {value_info.name!r} is declared {shown} but computed as {computed} "
                           f"(onnxruntime refuses the model)")


_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
           10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
NATIVE_DTYPES = frozenset(_DTYPES.values())
"""Element types the families' host code (llvmlite, numpy) computes in; a node reading any other
(bfloat16, float8, int4/int2, float4, string: `onnx_dtype`) runs through onnx.reference."""


def onnx_dtype(elem_type: int) -> str | None:
    """The numpy dtype name of an ONNX element type (ml_dtypes' for bfloat16, float8, int4, ...;
    'object' for strings), None for types that are not tensors of numbers, bools or strings."""
    if elem_type in _DTYPES:
        return _DTYPES[elem_type]
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return None
