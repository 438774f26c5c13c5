"""Elementwise math without llvmlite kernels yet, in numpy: variadic Sum/Mean (imported as the
Add chain they are, so a residual Sum is the accelerator's int8 add), Max/Min, Div, Pow,
activations (Sigmoid, HardSigmoid, HardSwish, Tanh, LeakyRelu, PRelu, Elu, Selu, Erf, Gelu, ...),
Sqrt/Exp/Log/..., comparisons, Not, Where and Cast.  All float-only (no int8 form)."""

from __future__ import annotations

from typing import Callable

import math

import numpy as np

from vtakit.errors import CompileError, pc_side_missing
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.registry import contiguous, OpDef, Precision, broadcast, register, text
from vtakit.compiler.ops.elementwise import infer_binary
from vtakit.compiler.ops.onnx_reference import convert_generic

_F = np.float32

try:
    from scipy import special
    _erf, _expit = special.erf, special.expit
except ImportError as missing:  # a board's runtime: the same functions from Python's math and numpy
    pc_side_missing(missing)
    def _erf(x: np.ndarray) -> np.ndarray:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.asarray(x).dtype)

    def _expit(x: np.ndarray) -> np.ndarray:
        return (1 / (1 + np.exp(-x))).astype(x.dtype)


def _convert_variadic(imp, n, name: str, at: dict) -> None:
    """Sum and Mean as a chain of two-input Adds (Mean then scaled by 1/n)."""
    ins, out = [i for i in n.input if i], n.output[0]
    if not ins:
        raise CompileError(f"{n.op_type} needs at least one input", node=name, op=n.op_type)
    if len(ins) == 1 and n.op_type == "Sum":
        imp.emit("Identity", name, ins, [out], {})
        return
    acc = ins[0]
    for k, x in enumerate(ins[1:], 1):
        last = k == len(ins) - 1 and n.op_type == "Sum"
        nxt = out if last else imp.graph.fresh_name(f"{name}.sum{k}")
        imp.emit("Add", name if last else f"{name}.add{k}", [acc, x], [nxt], {})
        acc = nxt
    if n.op_type == "Mean":
        scale = imp.graph.add_const(f"{name}.scale", np.array(1.0 / len(ins), _F))
        imp.emit("Mul", name, [acc, scale], [out], {})


def _convert_nary(imp, n, name: str, at: dict) -> None:
    imp.emit(n.op_type, name, [i for i in n.input if i], [n.output[0]], {})


def _infer_nary(node: Node, g: Graph) -> list[TensorInfo]:
    ins = [g.tensors[i] for i in node.inputs]
    shape = ins[0].shape
    for t in ins[1:]:
        shape = broadcast(node, shape, t.shape)
    return [TensorInfo(shape, ins[0].dtype)]


def _attrs_of(spec: dict[str, tuple[str, object]]) -> Callable:
    """A converter storing the named attributes (with their defaults) as plain values."""
    def convert(imp, n, name: str, at: dict) -> None:
        attrs = {}
        for key, (kind, default) in spec.items():
            v = at.get(key, default)
            attrs[key] = text(v) if kind == "s" else float(v) if kind == "f" else int(v)
        imp.emit(n.op_type, name, list(n.input), [n.output[0]], attrs)
    return convert


def _gelu(x: np.ndarray, a: dict) -> np.ndarray:
    if a.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


UNARY: dict[str, tuple[Callable[[np.ndarray, dict], np.ndarray], dict]] = {
    "Sigmoid": (lambda x, a: _expit(x), {}),
    "Tanh": (lambda x, a: np.tanh(x), {}),
    "Exp": (lambda x, a: np.exp(x), {}),
    "Log": (lambda x, a: np.log(x), {}),
    "Sqrt": (lambda x, a: np.sqrt(x), {}),
    "Erf": (lambda x, a: _erf(x), {}),
    "Abs": (lambda x, a: np.abs(x), {}),
    "Neg": (lambda x, a: np.negative(x), {}),
    "Reciprocal": (lambda x, a: np.reciprocal(x), {}),
    "Floor": (lambda x, a: np.floor(x), {}),
    "Ceil": (lambda x, a: np.ceil(x), {}),
    "Softplus": (lambda x, a: np.logaddexp(0, x), {}),
    "Softsign": (lambda x, a: x / (1 + np.abs(x)), {}),
    "Not": (lambda x, a: np.logical_not(x), {}),
    "HardSwish": (lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1), {}),
    "LeakyRelu": (lambda x, a: np.where(x >= 0, x, x * _F(a["alpha"])), {"alpha": ("f", 0.01)}),
    "Elu": (lambda x, a: np.where(x > 0, x, _F(a["alpha"]) * np.expm1(x)), {"alpha": ("f", 1.0)}),
    "Celu": (lambda x, a: np.maximum(x, 0) + np.minimum(0, _F(a["alpha"]) * np.expm1(x / _F(a["alpha"]))),
             {"alpha": ("f", 1.0)}),
    "Selu": (lambda x, a: _F(a["gamma"]) * np.where(x > 0, x, _F(a["alpha"]) * np.expm1(x)),
             {"alpha": ("f", 1.67326319217681884765625), "gamma": ("f", 1.05070102214813232421875)}),
    "ThresholdedRelu": (lambda x, a: np.where(x > _F(a["alpha"]), x, 0), {"alpha": ("f", 1.0)}),
    "HardSigmoid": (lambda x, a: np.clip(_F(a["alpha"]) * x + _F(a["beta"]), 0, 1),
                    {"alpha": ("f", 0.2), "beta": ("f", 0.5)}),
    "Gelu": (_gelu, {"approximate": ("s", "none")}),
    "Mish": (lambda x, a: x * np.tanh(np.logaddexp(0, x)), {}),
}

BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Div": lambda a, b: np.true_divide(a, b),  # cast back to a's dtype: integers truncate toward zero
    "Pow": lambda a, b: np.power(a, b.astype(a.dtype) if np.issubdtype(a.dtype, np.floating) else b),
    "PRelu": lambda x, s: np.where(x >= 0, x, x * s),
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}
COMPARE = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")


def _run_unary(node: Node, args: list, k) -> np.ndarray:
    x = np.asarray(args[0])
    y = UNARY[node.op][0](x, node.attrs)
    return contiguous(y.astype(x.dtype) if y.dtype != np.bool_ else y)


def _infer_unary(node: Node, g: Graph) -> list[TensorInfo]:
    x = g.tensors[node.inputs[0]]
    return [TensorInfo(x.shape, "bool" if node.op == "Not" else x.dtype)]


def _run_binary(node: Node, args: list, k) -> np.ndarray:
    a, b = np.asarray(args[0]), np.asarray(args[1])
    y = BINARY[node.op](a, b)
    return contiguous(y if y.dtype == np.bool_ else y.astype(a.dtype))


def _infer_binary_typed(node: Node, g: Graph) -> list[TensorInfo]:
    x, y = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
    shape = broadcast(node, x.shape, y.shape)
    return [TensorInfo(shape, "bool" if node.op in COMPARE else x.dtype)]


def _convert_binary(imp, n, name: str, at: dict) -> None:
    if at.get("broadcast") == 0 and imp.opset < 7:
        raise CompileError("legacy broadcast=0 is not supported", node=name, op=n.op_type)
    imp.emit(n.op_type, name, list(n.input)[:2], [n.output[0]], {})


def _convert_where(imp, n, name: str, at: dict) -> None:
    imp.emit("Where", name, list(n.input)[:3], [n.output[0]], {})


def _infer_where(node: Node, g: Graph) -> list[TensorInfo]:
    c, x, y = (g.tensors[i] for i in node.inputs)
    return [TensorInfo(broadcast(node, broadcast(node, c.shape, x.shape), y.shape), x.dtype)]


_CAST = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
         11: "float64", 12: "uint32", 13: "uint64", 4: "uint16"}


def _convert_cast(imp, n, name: str, at: dict) -> None:
    to = int(at["to"])
    if to not in _CAST:  # bfloat16, float8, int4, ...: onnx.reference rounds and saturates as ONNX says
        convert_generic(imp, n, name, at)
        return
    imp.emit("Cast", name, list(n.input)[:1], [n.output[0]], dict(to=_CAST[to]))


def _run_cast(node: Node, args: list, k) -> np.ndarray:
    return contiguous(np.asarray(args[0]).astype(node.attrs["to"]))


for _op, (_fn, _spec) in UNARY.items():
    register(OpDef(_op, _infer_unary, _run_unary, Precision.FLOAT, (_op,), _attrs_of(_spec), kernel="numpy"))
for _op in BINARY:
    register(OpDef(_op, _infer_binary_typed, _run_binary, Precision.FLOAT, (_op,), _convert_binary, kernel="numpy"))
register(OpDef("Sum", infer_binary, lambda n, a, k: a[0], None, ("Sum", "Mean"), _convert_variadic,
               (6, 8, 13), doc="imports as Add nodes (Mean: and a Mul)"),
         {"Sum": Precision.INT8, "Mean": Precision.FLOAT})
register(OpDef("Max", _infer_nary, lambda n, a, k: contiguous(np.maximum.reduce(np.broadcast_arrays(*a))),
               Precision.FLOAT, ("Max",), _convert_nary, (6, 8, 12, 13), kernel="numpy"))
register(OpDef("Min", _infer_nary, lambda n, a, k: contiguous(np.minimum.reduce(np.broadcast_arrays(*a))),
               Precision.FLOAT, ("Min",), _convert_nary, (6, 8, 12, 13), kernel="numpy"))
register(OpDef("Where", _infer_where, lambda n, a, k: contiguous(np.where(*a)), Precision.FLOAT,
               ("Where",), _convert_where, (9, 16), kernel="numpy"))
register(OpDef("Cast", lambda n, g: [TensorInfo(g.tensors[n.inputs[0]].shape, n.attrs["to"])], _run_cast,
               Precision.FLOAT, ("Cast",), _convert_cast, (6, 9, 13, 19, 21, 23, 24, 25), kernel="numpy"))
