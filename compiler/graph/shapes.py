"""Static shape and dtype inference for the graph IR's ops (normalised attributes, see onnx_frontend).

One function per op family; each returns the TensorInfo of every output or raises
a CompileError naming the node.  Passes call `infer` again after they rewrite a node.
"""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.graph.ir import Graph, Node, TensorInfo
from vtakit.isa.arith import ceil_div


def pool_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int = 1,
             ceil_mode: bool = False) -> int:
    """Output length of a convolution or pooling window along one axis (ONNX rules)."""
    span = dilation * (k - 1) + 1
    num = size + pad_lo + pad_hi - span
    out = (ceil_div(num, stride) if ceil_mode else num // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1  # the last window must start inside the input or its left padding
    return out


def _fail(node: Node, msg: str) -> CompileError:
    return CompileError(msg, node=node.name, op=node.op)


def _broadcast(node: Node, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise _fail(node, f"shapes {a} and {b} do not broadcast") from None


def _spatial(node: Node, x: TensorInfo, kernel, strides, pads, dilations, ceil_mode=False) -> tuple[int, int]:
    if len(x.shape) != 4:
        raise _fail(node, f"needs a 4-D NCHW input, got shape {x.shape}")
    _, _, h, w = x.shape
    oh = pool_out(h, kernel[0], strides[0], pads[0], pads[2], dilations[0], ceil_mode)
    ow = pool_out(w, kernel[1], strides[1], pads[1], pads[3], dilations[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise _fail(node, f"window {tuple(kernel)} with pads {tuple(pads)} does not fit a {h}x{w} input")
    return oh, ow


def infer(node: Node, graph: Graph) -> list[TensorInfo]:
    """Output infos of `node` from its inputs' infos in `graph`."""
    ins = [graph.tensors[i] if i else None for i in node.inputs]
    x = ins[0] if ins else None
    a = node.attrs
    op = node.op
    if op in ("Relu", "Clip", "Identity", "BatchNormalization", "Softmax"):
        return [x]
    if op in ("Add", "Mul", "Sub"):
        dtype = x.dtype if x.dtype == ins[1].dtype else "float32"
        return [TensorInfo(_broadcast(node, x.shape, ins[1].shape), dtype)]
    if op == "Conv":
        w = ins[1]
        if len(w.shape) != 4:
            raise _fail(node, f"only 2-D convolutions are supported (weight shape {w.shape})")
        if x.shape[1] != w.shape[1] * a["group"]:
            raise _fail(node, f"input has {x.shape[1]} channels, weight expects {w.shape[1]} x {a['group']} groups")
        if w.shape[0] % a["group"]:
            raise _fail(node, f"{w.shape[0]} output channels do not split into {a['group']} groups")
        oh, ow = _spatial(node, x, w.shape[2:], a["strides"], a["pads"], a["dilations"])
        return [TensorInfo((x.shape[0], w.shape[0], oh, ow), "float32")]
    if op in ("MaxPool", "AveragePool"):
        oh, ow = _spatial(node, x, a["kernel"], a["strides"], a["pads"], a.get("dilations", (1, 1)),
                          a.get("ceil_mode", False))
        return [TensorInfo(x.shape[:2] + (oh, ow), x.dtype)]
    if op == "GlobalAveragePool":
        if len(x.shape) != 4:
            raise _fail(node, f"needs a 4-D NCHW input, got shape {x.shape}")
        return [TensorInfo(x.shape[:2] + (1, 1), x.dtype)]
    if op == "Gemm":
        b = ins[1]
        if len(x.shape) != 2 or len(b.shape) != 2:
            raise _fail(node, f"Gemm needs 2-D inputs, got {x.shape} and {b.shape}")
        m, k = x.shape[::-1] if a["transA"] else x.shape
        k2, n = b.shape[::-1] if a["transB"] else b.shape
        if k != k2:
            raise _fail(node, f"inner dimensions differ: {k} and {k2}")
        return [TensorInfo((m, n), "float32")]
    if op == "MatMul":
        b = ins[1]
        if len(x.shape) < 1 or len(b.shape) < 1:
            raise _fail(node, "MatMul needs tensors of rank >= 1")
        xs = (1,) + x.shape if len(x.shape) == 1 else x.shape
        bs = b.shape + (1,) if len(b.shape) == 1 else b.shape
        if xs[-1] != bs[-2]:
            raise _fail(node, f"inner dimensions differ: {x.shape} @ {b.shape}")
        batch = _broadcast(node, xs[:-2], bs[:-2])
        out = batch + (xs[-2], bs[-1])
        if len(x.shape) == 1:
            out = out[:-2] + out[-1:]
        if len(b.shape) == 1:
            out = out[:-1]
        return [TensorInfo(out, "float32")]
    if op == "Flatten":
        axis = a["axis"]
        return [TensorInfo((int(np.prod(x.shape[:axis], dtype=np.int64)),
                            int(np.prod(x.shape[axis:], dtype=np.int64))), x.dtype)]
    if op == "Reshape":
        shape = tuple(a["shape"])
        if int(np.prod(shape, dtype=np.int64)) != x.size:
            raise _fail(node, f"cannot reshape {x.shape} into {shape}")
        return [TensorInfo(shape, x.dtype)]
    if op == "Transpose":
        perm = a["perm"]
        if sorted(perm) != list(range(len(x.shape))):
            raise _fail(node, f"perm {perm} is not a permutation of {len(x.shape)} axes")
        return [TensorInfo(tuple(x.shape[p] for p in perm), x.dtype)]
    if op == "Concat":
        axis = a["axis"]
        shape = list(x.shape)
        for t in ins[1:]:
            if len(t.shape) != len(shape) or any(s != u for d, (s, u) in enumerate(zip(shape, t.shape))
                                                 if d != axis):
                raise _fail(node, f"cannot concatenate {x.shape} and {t.shape} along axis {axis}")
            shape[axis] += t.shape[axis]
        return [TensorInfo(tuple(shape), x.dtype)]
    if op == "Pad":
        pads = a["pads"]
        r = len(x.shape)
        if len(pads) != 2 * r:
            raise _fail(node, f"{len(pads)} pads for a rank-{r} tensor")
        return [TensorInfo(tuple(s + pads[d] + pads[d + r] for d, s in enumerate(x.shape)), x.dtype)]
    if op == "QuantizeLinear":
        return [TensorInfo(x.shape, a["dtype"])]
    if op == "DequantizeLinear":
        return [TensorInfo(x.shape, "float32")]
    raise _fail(node, "no shape rule for this op")


def infer_graph(graph: Graph) -> None:
    """Fill in (or refresh) the TensorInfo of every node output, in order."""
    for node in graph.nodes:
        for name, info in zip(node.outputs, infer(node, graph)):
            graph.tensors[name] = info
