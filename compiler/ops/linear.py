"""Matrix products: Gemm, MatMul, Einsum, the folded Dense (y = x @ W.T + b) and the quantizer's QDense.

Gemm and a 2-D MatMul by a constant become Dense in `fold.canonicalize_dense`; only
Dense has an int8 form (constant weights).  An Einsum that is a (batched) matrix product imports
as MatMul (operands and result transposed as its equation says), so it reaches the same kernels
and the int8 path; any other Einsum runs through onnx.reference.

ActDense (y = x @ w.T, both operands activations) is one head of attention's products, Q.K^T or A.V, as
`passes/head_products.py` splits a batched MatMul of two activations; Head takes one (batch, head) slice.
Its int8 form QActDense multiplies two int8 tensors (the "product" rule: the exponents add), and the
accelerator runs it as a dense layer whose weights the host writes from the activation."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ops.epilogues import host_epilogue, run_requantized
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.onnx_reference import convert_generic, generic_def
from vtakit.compiler.ops.registry import FLOAT32, OpDef, Precision, broadcast, fail, register, text
from vtakit.compiler.ops.window import _weights_form


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


def einsum_matmul(equation: str, rank_a: int, rank_b: int):
    """(perm A, perm B, perm of the MatMul result) when `equation` is a (batched) matrix product: one
    row index only A has, one column index only B has, one index summed, the rest batch indices
    both have (a leading '...' in all three terms broadcasts like MatMul's batch); else None."""
    terms = equation.replace(" ", "")
    if "->" not in terms or terms.count(",") != 1:
        return None
    lhs, out = terms.split("->")
    a, b = lhs.split(",")
    ell = [t.startswith("...") for t in (a, b, out)]
    if any(ell) and not all(ell):
        return None
    a, b, out = (t[3:] if ell[0] else t for t in (a, b, out))
    if any("." in t or len(set(t)) != len(t) for t in (a, b, out)) or not set(out) <= set(a) | set(b):
        return None
    ea, eb = rank_a - len(a), rank_b - len(b)
    if min(ea, eb) < 0 or (not ell[0] and max(ea, eb) > 0):
        return None
    summed = [c for c in a if c in b and c not in out]
    rows, cols = [c for c in a if c not in b], [c for c in b if c not in a]
    batch = [c for c in out if c in a and c in b]
    if len(summed) != 1 or len(rows) != 1 or len(cols) != 1 or not set(rows + cols) <= set(out):
        return None
    perm_a = list(range(ea)) + [ea + a.index(c) for c in batch + rows + summed]
    perm_b = list(range(eb)) + [eb + b.index(c) for c in batch + summed + cols]
    got = batch + rows + cols  # the MatMul result's letters after the broadcast leading dims
    lead = max(ea, eb)
    return perm_a, perm_b, list(range(lead)) + [lead + got.index(c) for c in out]


def _convert_einsum(imp, n, name: str, at: dict) -> None:
    ins = list(n.input)
    infos = [imp.graph.tensors[i] for i in ins]
    perms = None
    if len(ins) == 2 and all(t.dtype == "float32" for t in infos):
        perms = einsum_matmul(text(at.get("equation")), len(infos[0].shape), len(infos[1].shape))
    if perms is None:
        convert_generic(imp, n, name, at)
        return
    operands = []
    for i, (t, perm) in enumerate(zip(ins, perms[:2])):
        if perm == sorted(perm):
            operands.append(t)
        elif t in imp.graph.consts:  # a constant operand (weights) is transposed now, for the int8 path
            imp.set_const(f"{name}.in{i}", imp.graph.consts[t].transpose(perm))
            operands.append(f"{name}.in{i}")
        else:
            imp.emit("Transpose", f"{name}.in{i}", [t], [f"{name}.in{i}"], dict(perm=perm))
            operands.append(f"{name}.in{i}")
    if perms[2] == sorted(perms[2]):
        imp.emit("MatMul", name, operands, [n.output[0]], {})
    else:
        imp.emit("MatMul", name, operands, [f"{name}.mm"], {})
        imp.emit("Transpose", f"{name}.out", [f"{name}.mm"], [n.output[0]], dict(perm=perms[2]))


def _infer_dense(node: Node, g: Graph) -> list[TensorInfo]:
    x, w = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
    return [TensorInfo((x.shape[0], w.shape[0]), "float32")]


def _run_dense(node: Node, args: list, k) -> object:
    return k.dense(args[0], args[1], args[2] if len(args) > 2 else None)


def _run_qdense(node: Node, args: list, k) -> object:
    a = node.attrs
    bias = args[2] if len(args) > 2 else None
    if host_epilogue(a):  # the int32 product, then the per-channel epilogue
        y = run_requantized(k.dense(args[0], args[1], bias), a, k)
    else:
        y = k.dense(args[0], args[1], bias, shift=a.get("shift"), clip=a.get("clip"))
    if "residual" in a:  # a residual add fused into the dense layer (passes.fusion): the QAdd's kernel after it
        shift, clip = a["residual"]
        y = k.add_int8(y, args[3], shift=shift, clip=tuple(clip))
    return y


register(OpDef("Gemm", _infer_gemm, _run_gemm, Precision.INT8, ("Gemm",), _convert_gemm, (7, 9, 11, 13),
               int8_form=lambda g, n: False, doc="int8 as Dense when B is constant (fold.canonicalize_dense)",
               dtypes=FLOAT32))
register(OpDef("MatMul", _infer_matmul, lambda n, a, k: k.matmul(a[0], a[1]), Precision.INT8, ("MatMul",),
               _convert_matmul, (1, 9, 13), int8_form=lambda g, n: False, dtypes=FLOAT32))
register(OpDef("Dense", _infer_dense, _run_dense, Precision.INT8, int8_form=_weights_form, int8_op="QDense",
               int8_rule="weights"))
generic_def("Einsum", versions=(12,), doc="a (batched) matmul imports as MatMul", convert=_convert_einsum)
register(OpDef("QDense", _infer_dense, _run_qdense, None))


def _infer_act_dense(node: Node, g: Graph) -> list[TensorInfo]:
    x, w = g.tensors[node.inputs[0]].shape, g.tensors[node.inputs[1]].shape
    if len(x) != 2 or len(w) != 2 or x[1] != w[1]:
        raise fail(node, f"needs x (M, K) and w (N, K), got {x} and {w}")
    return [TensorInfo((x[0], w[0]), "float32")]


def _run_qact_dense(node: Node, args: list, k) -> object:
    """int8 x int8: the int32 product (a wide output, no shift), or shifted and clipped to int8."""
    return k.dense(args[0], args[1], None, shift=node.attrs.get("shift"), clip=node.attrs.get("clip"))


def _infer_head(node: Node, g: Graph) -> list[TensorInfo]:
    x = g.tensors[node.inputs[0]]
    if not x.shape or not 0 <= node.attrs["index"] < x.shape[0]:
        raise fail(node, f"no slice {node.attrs['index']} of a {x.shape} tensor")
    return [TensorInfo(x.shape[1:], x.dtype)]


register(OpDef("ActDense", _infer_act_dense, lambda n, a, k: k.dense(a[0], a[1], None), Precision.INT8,
               int8_form=lambda g, n: not any(g.is_const(i) for i in n.inputs[:2]), int8_op="QActDense",
               int8_rule="product", doc="x @ w.T of two activations: one head of attention's products"))
register(OpDef("QActDense", _infer_act_dense, _run_qact_dense, None))
register(OpDef("Head", _infer_head, lambda n, a, k: np.ascontiguousarray(a[0][n.attrs["index"]]), Precision.FLOAT,
               kernel="numpy", doc="one (batch, head) slice of attention's operands (its own int8 scale)"))
