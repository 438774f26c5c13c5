"""Attention's products on the accelerator: a batched MatMul of two activations (Q.K^T, A.V: (..., T, d) @
(..., d, T')) becomes one ActDense per (batch, head) slice, y_h = a_h @ (b_h^T)^T, joined by a Concat.

The GEMM core multiplies an input tile by a weight tile; with both operands activations, the host writes
the right one to DRAM in the weight layout before the task (`runtime.WEIGHT_OPERAND`), the left one in the
rows layout of a dense layer.  One product per slice gives each head's operands their own int8 scale
(each slice is calibrated as its own tensor), which attention needs: heads differ in range.  The slices,
the transpose and the concat are host layout work the crossing does anyway."""

from __future__ import annotations

import math

from vtakit.compiler.ir import Graph, Node, TensorInfo

MAX_SLICES = 256
"""At most this many (batch, head) products per MatMul are split; a larger batch stays one host MatMul."""
MIN_SLICE_MACS = 1 << 17
"""A slice's product smaller than this stays in the host's MatMul: a task's fixed costs (its instructions,
micro-ops and weight load, two host slices and a crossing each way) outweigh its few GEMMs.  Swin's
7x7-window attention (49 x 32 x 49 = 77 k MACs a head) ran at 12 % of peak with 1,920 host slices."""


def _batched_product(g: Graph, n: Node) -> bool:
    if n.op != "MatMul" or len(n.inputs) != 2 or any(g.is_const(i) for i in n.inputs):
        return False
    a, b = (g.tensors[i] for i in n.inputs)
    return (a.dtype == b.dtype == "float32" and len(a.shape) == len(b.shape) >= 2 and a.shape[:-2] == b.shape[:-2]
            and a.shape[-1] == b.shape[-2] and math.prod(a.shape[:-2]) <= MAX_SLICES
            and a.shape[-2] * a.shape[-1] * b.shape[-1] >= MIN_SLICE_MACS)


def split_head_products(graph: Graph) -> Graph:
    """Every batched MatMul of two float activations as per-slice ActDense nodes (module docstring)."""
    g = graph.copy()
    out: list[Node] = []

    def emit(op: str, base: str, inputs: list[str], shape: tuple[int, ...], attrs: dict,
             output: str | None = None) -> str:
        name = output or g.fresh_name(f"{base}.out")
        if output is None:
            g.tensors[name] = TensorInfo(shape, "float32")
        out.append(Node(op, g.fresh_name(base), inputs, [name], attrs))
        return name

    for n in g.nodes:
        if not _batched_product(g, n):
            out.append(n)
            continue
        sa, sb = g.tensors[n.inputs[0]].shape, g.tensors[n.inputs[1]].shape
        slices, (rows, inner), cols = math.prod(sa[:-2]), sa[-2:], sb[-1]
        a = emit("Reshape", f"{n.name}.a_slices", [n.inputs[0]], (slices, rows, inner), dict(shape=(slices, rows, inner)))
        b = emit("Reshape", f"{n.name}.b_slices", [n.inputs[1]], (slices, inner, cols), dict(shape=(slices, inner, cols)))
        bt = emit("Transpose", f"{n.name}.b_rows", [b], (slices, cols, inner), dict(perm=(0, 2, 1)))
        parts = []
        for h in range(slices):
            ah = emit("Head", f"{n.name}.a{h}", [a], (rows, inner), dict(index=h))
            bh = emit("Head", f"{n.name}.b{h}", [bt], (cols, inner), dict(index=h))
            parts.append(emit("ActDense", f"{n.name}.head{h}", [ah, bh], (rows, cols), {}))
        joined = parts[0] if slices == 1 else emit("Concat", f"{n.name}.heads", parts, (slices * rows, cols),
                                                   dict(axis=0))
        emit("Reshape", f"{n.name}.out", [joined], g.tensors[n.outputs[0]].shape,
             dict(shape=tuple(g.tensors[n.outputs[0]].shape)), output=n.outputs[0])
    g.nodes = out
    g.prune()
    return g
