"""Matrix products: Gemm, MatMul, the folded Dense (y = x @ W.T + b) and the quantizer's QDense.

Gemm and a 2-D MatMul by a constant become Dense in `fold.canonicalize_dense`; only
Dense has an int8 form (constant weights)."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.channel_scales import run_requantized
from vtakit.compiler.graph.ir import Graph, Node, TensorInfo
from vtakit.compiler.graph.ops.accel import lower_linear
from vtakit.compiler.graph.ops.registry import OpDef, Precision, broadcast, fail, register
from vtakit.compiler.graph.ops.window import _weights_form


def _convert_gemm(imp, n, name: str, at: dict) -> None:
    attrs = dict(alpha=float(at.get("alpha", 1.0)), beta=float(at.get("beta", 1.0)),
                 transA=bool(at.get("transA", 0)), transB=bool(at.get("transB", 0)))
    imp.emit("Gemm", name, list(n.input)[:3], list(n.output)[:1], attrs)


def _infer_gemm(node: Node, g: Graph) -> list[TensorInfo]:
    x, b, a = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]], node.attrs
    if len(x.shape) != 2 or len(b.shape) != 2:
        raise fail(node, f"Gemm needs 2-D inputs, got {x.shape} and {b.shape}")
    m, k = x.shape[::-1] if a["transA"] else x.shape
    k2, n = b.shape[::-1] if a["transB"] else b.shape
    if k != k2:
        raise fail(node, f"inner dimensions differ: {k} and {k2}")
    return [TensorInfo((m, n), "float32")]


def _run_gemm(node: Node, args: list, k) -> object:
    a = node.attrs
    x, b, c = args[0], args[1], args[2] if len(args) > 2 else None
    x = k.transpose(x, (1, 0)) if a["transA"] else x
    b = k.transpose(b, (1, 0)) if a["transB"] else b
    y = k.matmul(x, b)
    if a["alpha"] != 1.0:
        y = k.mul(y, np.array(a["alpha"], np.float32))
    if c is not None and a["beta"] != 0.0:
        c = c if a["beta"] == 1.0 else k.mul(c, np.array(a["beta"], np.float32))
        y = k.add(y, c)
    return y


def matmul_shape(node: Node, xs0: tuple[int, ...], bs0: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's output shape, or one error naming the node."""
    if len(xs0) < 1 or len(bs0) < 1:
        raise fail(node, "MatMul needs tensors of rank >= 1")
    xs = (1,) + xs0 if len(xs0) == 1 else xs0
    bs = bs0 + (1,) if len(bs0) == 1 else bs0
    if xs[-1] != bs[-2]:
        raise fail(node, f"inner dimensions differ: {xs0} @ {bs0}")
    out = broadcast(node, xs[:-2], bs[:-2]) + (xs[-2], bs[-1])
    if len(xs0) == 1:
        out = out[:-2] + out[-1:]
    if len(bs0) == 1:
        out = out[:-1]
    return out


def _infer_matmul(node: Node, g: Graph) -> list[TensorInfo]:
    x, b = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
    return [TensorInfo(matmul_shape(node, x.shape, b.shape), "float32")]


def _convert_matmul(imp, n, name: str, at: dict) -> None:
    imp.emit("MatMul", name, list(n.input)[:2], list(n.output)[:1], {})


def _infer_dense(node: Node, g: Graph) -> list[TensorInfo]:
    x, w = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
    return [TensorInfo((x.shape[0], w.shape[0]), "float32")]


def _run_dense(node: Node, args: list, k) -> object:
    return k.dense(args[0], args[1], args[2] if len(args) > 2 else None)


def _run_qdense(node: Node, args: list, k) -> object:
    a = node.attrs
    if isinstance(a.get("shift"), tuple):  # the int32 product, then the per-channel epilogue
        return run_requantized(k.dense(args[0], args[1], args[2] if len(args) > 2 else None), a["shift"],
                               a["clip"], k)
    return k.dense(args[0], args[1], args[2] if len(args) > 2 else None, shift=a.get("shift"), clip=a.get("clip"))


register(OpDef("Gemm", _infer_gemm, _run_gemm, Precision.INT8, ("Gemm",), _convert_gemm, (7, 9, 11, 13),
               int8_form=lambda g, n: False, doc="int8 as Dense when B is constant (fold.canonicalize_dense)"))
register(OpDef("MatMul", _infer_matmul, lambda n, a, k: k.matmul(a[0], a[1]), Precision.INT8, ("MatMul",),
               _convert_matmul, (1, 9, 13), int8_form=lambda g, n: False))
register(OpDef("Dense", _infer_dense, _run_dense, Precision.INT8, int8_form=_weights_form))
register(OpDef("QDense", _infer_dense, _run_qdense, None, accel=lambda g, n, cfg: None, lower=lower_linear))
