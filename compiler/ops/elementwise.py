"""Elementwise ops with llvmlite kernels: Relu, Clip, Add, Mul, Sub and the quantizer's QAdd.

Relu and Clip only bound values (precision-neutral); Add of two same-shape
activations is the residual add the accelerator does in int8."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.errors import CompileError
from typing import Callable

from vtakit.compiler.ops.registry import OpDef, Precision, broadcast, contiguous, register, same
from vtakit.compiler.ops.epilogues import run_wide_add

_F32_MAX = float(np.finfo(np.float32).max)


def clip_bound(v: float) -> float:
    return max(min(v, _F32_MAX), -_F32_MAX)


def convert_binary(imp, n, name: str, at: dict) -> None:
    imp.emit(n.op_type, name, list(n.input)[:2], list(n.output)[:1], {})


def infer_binary(node: Node, g: Graph) -> list[TensorInfo]:
    x, y = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
    dtype = x.dtype if x.dtype == y.dtype else "float32"
    return [TensorInfo(broadcast(node, x.shape, y.shape), dtype)]


def _convert_relu(imp, n, name: str, at: dict) -> None:
    imp.emit("Relu", name, list(n.input)[:1], list(n.output)[:1], {})


def _clip_bound(value, name: str, which: str) -> float:
    """A Clip bound: a scalar by the spec; exporters also write one-element tensors, read the same."""
    v = np.asarray(value)
    if v.size != 1:
        raise CompileError(f"Clip {which} must be a scalar, got shape {v.shape}", node=name)
    return float(v.reshape(-1)[0])


def _convert_clip(imp, n, name: str, at: dict) -> None:
    lo, hi = at.get("min", -np.inf), at.get("max", np.inf)
    if imp.opset >= 11:  # bounds moved from attributes to optional inputs
        lo_c, hi_c = imp.const_input(n, name, 1, "Clip min"), imp.const_input(n, name, 2, "Clip max")
        lo = _clip_bound(lo_c, name, "min") if lo_c is not None else -np.inf
        hi = _clip_bound(hi_c, name, "max") if hi_c is not None else np.inf
    imp.emit("Clip", name, list(n.input)[:1], list(n.output)[:1], dict(lo=float(lo), hi=float(hi)))


def _run_clip(node: Node, args: list, k) -> object:
    x, a = args[0], node.attrs
    if x.dtype == np.int8:
        return k.clip(x, int(max(a["lo"], -128)), int(min(a["hi"], 127)))
    if isinstance(x, np.ndarray) and x.dtype != np.float32:
        return contiguous(np.clip(x, a["lo"], a["hi"]).astype(x.dtype))
    return k.clip(x, clip_bound(a["lo"]), clip_bound(a["hi"]))


def _add_form(g: Graph, n: Node) -> bool:
    a, b = (g.tensors[i] for i in n.inputs)
    return a.shape == b.shape and not any(g.is_const(i) for i in n.inputs)


def _run_qadd(node: Node, args: list, k) -> object:
    a = node.attrs
    if "left" in a:  # one operand a wide conv's int32 result (quant.techniques.wide_residual)
        return run_wide_add(node, args, k)
    return k.add_int8(args[0], args[1], shift=a.get("shift", 0), clip=tuple(a.get("clip", (-128, 127))))


def _binary(kernel: str, fn) -> "Callable":
    """The llvmlite kernel for float32 (and int8 where the kernel takes it), numpy for other dtypes,
    scalars and empty tensors."""
    def run(node: Node, args: list, k) -> object:
        a, b = args[0], args[1]
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and (
                a.dtype != np.float32 or b.dtype != np.float32 or a.size == 0 or b.size == 0 or a.ndim == 0):
            return contiguous(fn(a, b).astype(a.dtype if a.dtype == b.dtype else np.result_type(a, b)))
        return getattr(k, kernel)(a, b)
    return run


register(OpDef("Relu", same, lambda n, a, k: k.relu(a[0]) if getattr(a[0], "dtype", np.float32) in (np.float32, np.int8)
               else contiguous(np.maximum(a[0], 0).astype(a[0].dtype)), Precision.NEUTRAL, ("Relu",), _convert_relu,
               (1, 6, 13, 14)))
register(OpDef("Clip", same, _run_clip, Precision.NEUTRAL, ("Clip",), _convert_clip, (1, 6, 11, 12, 13)))
register(OpDef("Add", infer_binary, _binary("add", np.add), Precision.INT8, ("Add",), convert_binary,
               (1, 6, 7, 13, 14), int8_form=_add_form, int8_op="QAdd", int8_rule="sum"))
register(OpDef("Mul", infer_binary, _binary("mul", np.multiply), Precision.FLOAT, ("Mul",), convert_binary,
               (1, 6, 7, 13, 14)))
register(OpDef("Sub", infer_binary, _binary("sub", np.subtract), Precision.FLOAT, ("Sub",), convert_binary,
               (1, 6, 7, 13, 14)))
register(OpDef("QAdd", infer_binary, _run_qadd, None))
