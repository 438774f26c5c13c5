"""Run a graph (float or quantized) on the host, node by node, with the llvmlite CPU kernels.

This one interpreter serves four purposes: `--target cpu`, the host tasks of a
mixed graph, calibration (an observer sees every tensor) and constant folding.
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


def _softmax(x: np.ndarray, a: dict) -> np.ndarray:
    if not a.get("legacy"):
        return cpu.softmax(x, axis=a["axis"])
    rows = int(np.prod(x.shape[:a["axis"]], dtype=np.int64))  # opset < 13: softmax over the flattened tail
    return cpu.softmax(x.reshape(rows, -1), axis=-1).reshape(x.shape)


def _gemm(node: Node, x: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    a = node.attrs
    x = cpu.transpose(x, (1, 0)) if a["transA"] else x
    b = cpu.transpose(b, (1, 0)) if a["transB"] else b
    y = cpu.matmul(x, b)
    if a["alpha"] != 1.0:
        y = cpu.mul(y, np.float32(a["alpha"]).reshape(()))
    if c is not None and a["beta"] != 0.0:
        y = cpu.add(y, (c * np.float32(a["beta"])).astype(np.float32))
    return y


def _quantize_linear(x: np.ndarray, a: dict) -> np.ndarray:
    info = np.iinfo(a["dtype"])
    q = np.rint(x / np.float32(a["scale"])) + a["zero_point"]
    return np.clip(q, info.min, info.max).astype(a["dtype"])


def _dequantize_linear(x: np.ndarray, a: dict) -> np.ndarray:
    return ((x.astype(np.int32) - a["zero_point"]).astype(np.float32) * np.float32(a["scale"])).astype(np.float32)


def run_node(node: Node, args: list[np.ndarray | None]) -> np.ndarray:
    """The value of a node's (single) output from its input values (a fused activation applied)."""
    y = _run_op(node, args)
    if "act" in node.attrs and y.dtype == np.float32:
        lo, hi = node.attrs["act"]
        y = cpu.clip(y, _clip_bound(lo), _clip_bound(hi))
    return y


def _run_op(node: Node, args: list[np.ndarray | None]) -> np.ndarray:
    a, op = node.attrs, node.op
    x = args[0]
    if op == "Conv":
        return cpu.conv2d(x, args[1], args[2] if len(args) > 2 else None, stride=a["strides"], pads=a["pads"],
                          dilation=a["dilations"], groups=a["group"])
    if op == "QConv":
        return cpu.conv2d(x, args[1], args[2] if len(args) > 2 else None, stride=a["strides"], pads=a["pads"],
                          dilation=a["dilations"], groups=a["group"], shift=a.get("shift"), clip=a.get("clip"))
    if op == "Dense":
        return cpu.dense(x, args[1], args[2] if len(args) > 2 else None)
    if op == "QDense":
        return cpu.dense(x, args[1], args[2] if len(args) > 2 else None, shift=a.get("shift"), clip=a.get("clip"))
    if op == "QAdd":
        return cpu.add_int8(x, args[1], shift=a.get("shift", 0), clip=tuple(a.get("clip", (-128, 127))))
    if op == "Gemm":
        return _gemm(node, x, args[1], args[2] if len(args) > 2 else None)
    if op == "MatMul":
        return cpu.matmul(x, args[1])
    if op == "Relu":
        return cpu.relu(x)
    if op == "Clip":
        if x.dtype == np.int8:
            return cpu.clip(x, int(a["lo"]), int(a["hi"]))
        return cpu.clip(x, _clip_bound(a["lo"]), _clip_bound(a["hi"]))
    if op in ("Add", "Mul", "Sub"):
        return getattr(cpu, op.lower())(x, args[1])
    if op == "MaxPool":
        return cpu.max_pool2d(x, kernel=a["kernel"], stride=a["strides"], pads=a["pads"], dilation=a["dilations"],
                              ceil_mode=a["ceil_mode"])
    if op == "AveragePool":
        return cpu.avg_pool2d(x, kernel=a["kernel"], stride=a["strides"], pads=a["pads"],
                              count_include_pad=a["count_include_pad"], ceil_mode=a["ceil_mode"])
    if op == "GlobalAveragePool":
        return cpu.global_avg_pool(x)
    if op == "BatchNormalization":
        return cpu.batch_norm(x, *args[1:5], a["epsilon"])
    if op == "Flatten":
        return x.reshape(int(np.prod(x.shape[:a["axis"]], dtype=np.int64)), -1)
    if op == "Reshape":
        return x.reshape(a["shape"])
    if op == "Transpose":
        return cpu.transpose(x, tuple(a["perm"]))
    if op == "Concat":
        return cpu.concat(list(args), a["axis"])
    if op == "Softmax":
        return _softmax(x, a)
    if op == "Pad":
        return cpu.pad(x, a["pads"], a["value"])
    if op == "Identity":
        return x
    if op == "Quantize":
        return cpu.quantize(x, a["exp"])
    if op == "Dequantize":
        return cpu.dequantize(x, a["exp"])
    if op == "QuantizeLinear":
        return _quantize_linear(x, a)
    if op == "DequantizeLinear":
        return _dequantize_linear(x, a)
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
