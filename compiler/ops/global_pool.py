"""GlobalMaxPool and GlobalAveragePool over every spatial axis, of any rank: (N, C, L), (N, C, D, H, W)...

onnx.reference (onnx 1.22 and 1.23) reduces the channel axis too in GlobalMaxPool on a 3-D (N, C, L)
tensor (it returns (N, 1) where ONNX says (N, C, 1)) and keeps an extra axis on 5-D ones, so these run in
numpy here, and the generic path uses the same kernel (`onnx_reference.correct`).  A 4-D
GlobalAveragePool keeps its llvmlite kernel (`window.py`); other ranks come here.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.onnx_reference import correct
from vtakit.compiler.ops.registry import OpDef, Precision, contiguous, fail, register

FLOATS = ("float32", "float64", "float16")
NUMBERS = FLOATS + ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def global_pool(x: np.ndarray, mode: str) -> np.ndarray:
    """`x` (N, C, ...) reduced over every axis after the channels, kept as size-1 axes."""
    x = np.asarray(x)
    axes = tuple(range(2, x.ndim))
    if mode == "max":
        return contiguous(x.max(axis=axes, keepdims=True) if x.size else x.reshape(x.shape[:2] + (1,) * len(axes)))
    return contiguous(x.mean(axis=axes, keepdims=True, dtype=np.float64).astype(x.dtype))


def _mode(node: Node) -> str:
    return "max" if node.op == "GlobalMaxPool" else "mean"


def convert_global_pool(imp, n, name: str, at: dict) -> None:
    """Import a GlobalMaxPool, or a GlobalAveragePool of a rank other than 4."""
    op = "GlobalMaxPool" if n.op_type == "GlobalMaxPool" else "GlobalAveragePoolNd"
    imp.emit(op, name, list(n.input)[:1], list(n.output)[:1], {})


def _infer(node: Node, g: Graph) -> list[TensorInfo]:
    x = g.tensors[node.inputs[0]]
    if len(x.shape) < 2:
        raise fail(node, f"needs an (N, C, ...) input, got shape {x.shape}")
    if x.dtype not in (NUMBERS if _mode(node) == "max" else FLOATS):
        raise fail(node, f"does not take {x.dtype} inputs")
    return [TensorInfo(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]


def _run(node: Node, args: list, k) -> np.ndarray:
    return global_pool(args[0], _mode(node))


correct("GlobalMaxPool", lambda attrs, args: [global_pool(args[0], "max")])
correct("GlobalAveragePool", lambda attrs, args: [global_pool(args[0], "mean")])
register(OpDef("GlobalMaxPool", _infer, _run, Precision.FLOAT, ("GlobalMaxPool",), convert_global_pool, (1, 22),
               kernel="numpy", doc="any rank (onnx.reference's is wrong on 3-D and 5-D inputs)"))
register(OpDef("GlobalAveragePoolNd", _infer, _run, Precision.FLOAT, (), convert_global_pool, (1, 22),
               kernel="numpy", doc="GlobalAveragePool of a rank other than 4 (window.py's is 4-D)"))
