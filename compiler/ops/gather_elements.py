"""GatherElements: `out[i][j][k] = data[index[i][j][k]][j][k]` (along `axis`), in numpy.

onnx.reference (onnx 1.22 and 1.23) fails when the indices are smaller than the data along an axis other
than `axis` (a Hugging Face BERT export: data (1, 512), indices (1, 128): "cannot reshape array of size 1
into shape (1,128)"); onnxruntime reads only the leading part of the data there, and so does this kernel.
Negative indices count from the end; an index out of bounds is one error naming the node, never a wrap.
The generic path, constant folding at import included, uses the same kernel (`onnx_reference.correct`).
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.onnx_reference import correct
from vtakit.compiler.ops.registry import OpDef, Precision, contiguous, fail, register
from vtakit.errors import CompileError


def _check(data_shape: tuple, index_shape: tuple, axis: int) -> str | None:
    """Why indices of `index_shape` cannot gather from data of `data_shape` along `axis` (None: they can)."""
    if len(data_shape) != len(index_shape):
        return f"indices of rank {len(index_shape)} for data of rank {len(data_shape)}"
    if not -len(data_shape) <= axis < max(len(data_shape), 1):
        return f"axis {axis} is out of range for rank {len(data_shape)}"
    axis %= max(len(data_shape), 1)
    if any(i > d for k, (d, i) in enumerate(zip(data_shape, index_shape)) if k != axis):
        return f"indices {tuple(index_shape)} are larger than the data {tuple(data_shape)} off axis {axis}"
    return None


def gather_elements(data, indices, axis: int) -> np.ndarray:
    """The op's value; a ValueError says what is wrong with the operands."""
    data, indices = np.asarray(data), np.asarray(indices)
    why = _check(data.shape, indices.shape, axis)
    if why:
        raise ValueError(why)
    axis %= max(data.ndim, 1)
    if indices.dtype.kind not in "iu":
        raise ValueError(f"indices are {indices.dtype}; int32 or int64 expected")
    size = data.shape[axis] if data.ndim else 1
    idx = indices.astype(np.int64)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise ValueError(f"an index ({int(idx.min())} to {int(idx.max())}) is out of bounds for size {size} on axis {axis}")
    idx = np.where(idx < 0, idx + size, idx)
    if data.ndim == 0:
        return contiguous(data.copy())
    lead = tuple(slice(0, s) if k != axis else slice(None) for k, s in enumerate(indices.shape))
    return contiguous(np.take_along_axis(data[lead], idx, axis))


def _convert(imp, n, name: str, at: dict) -> None:
    data, idx = (imp.graph.tensors[t] for t in n.input[:2])
    axis = int(at.get("axis", 0))
    why = _check(data.shape, idx.shape, axis)
    if why:
        raise CompileError(why, node=name, op="GatherElements")
    imp.emit("GatherElements", name, list(n.input)[:2], list(n.output)[:1],
             dict(axis=axis % max(len(data.shape), 1)))


def _infer(node: Node, g: Graph) -> list[TensorInfo]:
    data, idx = (g.tensors[t] for t in node.inputs[:2])
    why = _check(data.shape, idx.shape, node.attrs["axis"])
    if why:
        raise fail(node, why)
    return [TensorInfo(idx.shape, data.dtype)]


def _run(node: Node, args: list, k) -> np.ndarray:
    try:
        return gather_elements(args[0], args[1], node.attrs["axis"])
    except ValueError as e:
        raise fail(node, str(e)) from None


correct("GatherElements", lambda attrs, args: [gather_elements(args[0], args[1], int(attrs.get("axis", 0)))])
register(OpDef("GatherElements", _infer, _run, Precision.FLOAT, ("GatherElements",), _convert, (11, 13),
               kernel="numpy", doc="indices smaller than the data off the axis too (onnx.reference fails there)"))
