"""Elementwise ops with llvmlite kernels: Relu, Clip, Add, Mul, Sub and the quantizer's QAdd.

Relu and Clip only bound values (precision-neutral); Add of two same-shape
activations is the residual add the accelerator does in int8."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node, TensorInfo
from vtakit.compiler.graph.ops.registry import OpDef, Precision, broadcast, register, same

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


def _convert_clip(imp, n, name: str, at: dict) -> None:
    lo, hi = at.get("min", -np.inf), at.get("max", np.inf)
    if imp.opset >= 11:  # bounds moved from attributes to optional inputs
        lo_c, hi_c = imp.const_input(n, name, 1, "Clip min"), imp.const_input(n, name, 2, "Clip max")
        lo = float(lo_c) if lo_c is not None else -np.inf
        hi = float(hi_c) if hi_c is not None else np.inf
    imp.emit("Clip", name, list(n.input)[:1], list(n.output)[:1], dict(lo=float(lo), hi=float(hi)))


def _run_clip(node: Node, args: list, k) -> object:
    x, a = args[0], node.attrs
    if x.dtype == np.int8:
        return k.clip(x, int(a["lo"]), int(a["hi"]))
    return k.clip(x, clip_bound(a["lo"]), clip_bound(a["hi"]))


def _add_form(g: Graph, n: Node) -> bool:
    a, b = (g.tensors[i] for i in n.inputs)
    return a.shape == b.shape and not any(g.is_const(i) for i in n.inputs)


def _place_qadd(g: Graph, n: Node, cfg) -> str | None:
    shapes = {g.tensors[i].shape for i in n.inputs}
    if len(shapes) != 1 or len(next(iter(shapes))) not in (2, 4):
        return "broadcasting add"
    return None


def _place_relu(g: Graph, n: Node, cfg) -> str | None:
    x = g.tensors[n.inputs[0]]
    return None if x.dtype == "int8" and len(x.shape) == 4 else "no accelerator form"


def _run_qadd(node: Node, args: list, k) -> object:
    a = node.attrs
    return k.add_int8(args[0], args[1], shift=a.get("shift", 0), clip=tuple(a.get("clip", (-128, 127))))


register(OpDef("Relu", same, lambda n, a, k: k.relu(a[0]), Precision.NEUTRAL, ("Relu",), _convert_relu,
               (1, 6, 13, 14), accel=_place_relu))
register(OpDef("Clip", same, _run_clip, Precision.NEUTRAL, ("Clip",), _convert_clip, (1, 6, 11, 12, 13)))
register(OpDef("Add", infer_binary, lambda n, a, k: k.add(a[0], a[1]), Precision.INT8, ("Add",), convert_binary,
               (1, 6, 7, 13, 14), int8_form=_add_form))
register(OpDef("Mul", infer_binary, lambda n, a, k: k.mul(a[0], a[1]), Precision.FLOAT, ("Mul",), convert_binary,
               (1, 6, 7, 13, 14)))
register(OpDef("Sub", infer_binary, lambda n, a, k: k.sub(a[0], a[1]), Precision.FLOAT, ("Sub",), convert_binary,
               (1, 6, 7, 13, 14)))
register(OpDef("QAdd", infer_binary, _run_qadd, None, accel=_place_qadd))
