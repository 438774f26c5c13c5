"""Run a graph (float or quantized) on the host, node by node, with the llvmlite CPU kernels.

This one interpreter serves five purposes: `--target cpu`, the host tasks of a
mixed graph, calibration (an observer sees every tensor), constant folding, and
(with the GPU backend's kernels passed as `kernels`) `--target cuda` / `--host cuda`.
Integer ops follow the accelerator's arithmetic exactly (arithmetic shift right,
then clip), so a quantized graph run here is the bit-exact reference for what the
accelerator computes.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler import cpu
from vtakit.compiler.graph.ir import Graph, Node

Observer = Callable[[str, np.ndarray], None]
_F32_MAX = float(np.finfo(np.float32).max)


def _clip_bound(v: float) -> float:
    return max(min(v, _F32_MAX), -_F32_MAX)


def _softmax(x: np.ndarray, a: dict, k=cpu) -> np.ndarray:
    if not a.get("legacy"):
        return k.softmax(x, axis=a["axis"])
    rows = int(np.prod(x.shape[:a["axis"]], dtype=np.int64))  # opset < 13: softmax over the flattened tail
    return k.softmax(x.reshape(rows, -1), axis=-1).reshape(x.shape)


def _gemm(node: Node, x: np.ndarray, b: np.ndarray, c: np.ndarray | None, k=cpu) -> np.ndarray:
    a = node.attrs
    x = k.transpose(x, (1, 0)) if a["transA"] else x
    b = k.transpose(b, (1, 0)) if a["transB"] else b
    y = k.matmul(x, b)
    if a["alpha"] != 1.0:
        y = k.mul(y, np.float32(a["alpha"]).reshape(()))
    if c is not None and a["beta"] != 0.0:
        c = c if a["beta"] == 1.0 else k.mul(c, np.float32(a["beta"]).reshape(()))
        y = k.add(y, c)
    return y


def _quantize_linear(x: np.ndarray, a: dict) -> np.ndarray:
    info = np.iinfo(a["dtype"])
    q = np.rint(x / np.float32(a["scale"])) + a["zero_point"]
    return np.clip(q, info.min, info.max).astype(a["dtype"])


def _dequantize_linear(x: np.ndarray, a: dict) -> np.ndarray:
    return ((x.astype(np.int32) - a["zero_point"]).astype(np.float32) * np.float32(a["scale"])).astype(np.float32)


def run_node(node: Node, args: list[np.ndarray | None], kernels=cpu) -> np.ndarray:
    """The value of a node's (single) output from its input values (a fused activation applied).

    `kernels` is the host backend: `compiler.cpu`, or a `compiler.cuda.GpuKernels` (same function
    names; values are then DeviceArrays that stay on the GPU)."""
    y = _run_op(node, args, kernels)
    if "act" in node.attrs and y.dtype == np.float32:
        lo, hi = node.attrs["act"]
        y = kernels.clip(y, _clip_bound(lo), _clip_bound(hi))
    return y


def _run_op(node: Node, args: list[np.ndarray | None], k=cpu) -> np.ndarray:
    a, op = node.attrs, node.op
    x = args[0]
    if op == "Conv":
        return k.conv2d(x, args[1], args[2] if len(args) > 2 else None, stride=a["strides"], pads=a["pads"],
                        dilation=a["dilations"], groups=a["group"])
    if op == "QConv":
        return k.conv2d(x, args[1], args[2] if len(args) > 2 else None, stride=a["strides"], pads=a["pads"],
                        dilation=a["dilations"], groups=a["group"], shift=a.get("shift"), clip=a.get("clip"))
    if op == "Dense":
        return k.dense(x, args[1], args[2] if len(args) > 2 else None)
    if op == "QDense":
        return k.dense(x, args[1], args[2] if len(args) > 2 else None, shift=a.get("shift"), clip=a.get("clip"))
    if op == "QAdd":
        return k.add_int8(x, args[1], shift=a.get("shift", 0), clip=tuple(a.get("clip", (-128, 127))))
    if op == "Gemm":
        return _gemm(node, x, args[1], args[2] if len(args) > 2 else None, k)
    if op == "MatMul":
        return k.matmul(x, args[1])
    if op == "Relu":
        return k.relu(x)
    if op == "Clip":
        if x.dtype == np.int8:
            return k.clip(x, int(a["lo"]), int(a["hi"]))
        return k.clip(x, _clip_bound(a["lo"]), _clip_bound(a["hi"]))
    if op in ("Add", "Mul", "Sub"):
        return getattr(k, op.lower())(x, args[1])
    if op == "MaxPool":
        return k.max_pool2d(x, kernel=a["kernel"], stride=a["strides"], pads=a["pads"], dilation=a["dilations"],
                            ceil_mode=a["ceil_mode"])
    if op == "AveragePool":
        return k.avg_pool2d(x, kernel=a["kernel"], stride=a["strides"], pads=a["pads"],
                            count_include_pad=a["count_include_pad"], ceil_mode=a["ceil_mode"])
    if op == "GlobalAveragePool":
        return k.global_avg_pool(x)
    if op == "BatchNormalization":
        return k.batch_norm(x, *args[1:5], a["epsilon"])
    if op == "Flatten":
        return x.reshape(int(np.prod(x.shape[:a["axis"]], dtype=np.int64)), -1)
    if op == "Reshape":
        return x.reshape(a["shape"])
    if op == "Transpose":
        return k.transpose(x, tuple(a["perm"]))
    if op == "Concat":
        return k.concat(list(args), a["axis"])
    if op == "Softmax":
        return _softmax(x, a, k)
    if op == "Pad":
        return k.pad(x, a["pads"], a["value"])
    if op == "Identity":
        return x
    if op == "Quantize":
        return k.quantize(x, a["exp"])
    if op == "Dequantize":
        return k.dequantize(x, a["exp"])
    if op == "QuantizeLinear":
        return _quantize_linear(x, a) if k is cpu else k.quantize_linear(x, a["scale"], a["zero_point"], a["dtype"])
    if op == "DequantizeLinear":
        return _dequantize_linear(x, a) if k is cpu else k.dequantize_linear(x, a["scale"], a["zero_point"])
    raise CompileError("the host backend has no kernel for this op", node=node.name, op=op)


def check_feeds(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's inputs from `feeds`, with shape and dtype checked (one clear error per problem)."""
    out = {}
    for name in graph.inputs:
        if name not in feeds:
            raise CompileError(f"no value for input {name!r} (inputs: {graph.inputs})")
        info = graph.tensors[name]
        v = np.asarray(feeds[name])
        if tuple(v.shape) != tuple(info.shape):
            raise CompileError(f"input {name!r} has shape {tuple(v.shape)}, the model was compiled for "
                               f"{tuple(info.shape)}")
        if v.dtype != np.dtype(info.dtype):
            if info.dtype == "float32" and np.issubdtype(v.dtype, np.floating):
                v = v.astype(np.float32)
            else:
                raise CompileError(f"input {name!r} is {v.dtype}, the model expects {info.dtype}")
        out[name] = np.ascontiguousarray(v)
    extra = sorted(set(feeds) - set(graph.inputs))
    if extra:
        raise CompileError(f"unknown inputs {extra} (inputs: {graph.inputs})")
    return out


def run_graph(graph: Graph, feeds: dict[str, np.ndarray], observer: Observer | None = None,
              keep: bool = False) -> dict[str, np.ndarray]:
    """Every graph output (or, with `keep`, every tensor) computed on the host."""
    env: dict[str, np.ndarray] = dict(graph.consts)
    env.update(check_feeds(graph, feeds))
    last_use = {}
    for i, n in enumerate(graph.nodes):
        for t in n.inputs:
            last_use[t] = i
    for i, n in enumerate(graph.nodes):
        value = run_node(n, [env[t] if t else None for t in n.inputs])
        env[n.outputs[0]] = value
        if observer is not None:
            observer(n.outputs[0], value)
        if not keep:
            for t in n.inputs:
                if last_use.get(t) == i and t not in graph.outputs and t not in graph.consts:
                    env.pop(t, None)
    return env if keep else {o: env[o] for o in graph.outputs}
