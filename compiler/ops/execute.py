"""Run a graph (float or quantized) on the host, node by node, with the llvmlite CPU kernels.

Each op's host execution is its registry definition's `run` (`ops/`).  This one
interpreter serves five purposes: `--target cpu`, the host tasks of a
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
from vtakit.compiler.backends import cpu
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.ops import op_def
from vtakit.compiler.ops.elementwise import clip_bound
from vtakit.compiler.ops.registry import contiguous
from vtakit.compiler.ops.quant import dequantize_linear as _dequantize_linear  # noqa: F401
from vtakit.compiler.ops.quant import quantize_linear as _quantize_linear  # noqa: F401

Observer = Callable[[str, np.ndarray], None]


def run_node(node: Node, args: list[np.ndarray | None], kernels=cpu) -> np.ndarray:
    """The value of a node's (single) output from its input values (a fused activation applied).

    `kernels` is the host backend: `compiler.backends.cpu`, or a `compiler.backends.cuda.GpuKernels` (same function
    names; values are then DeviceArrays that stay on the GPU).  Ops without a kernel of the backend
    (numpy or onnx.reference ones) run on host copies of their inputs."""
    d = op_def(node.op, node)
    if d.kernel != "llvmlite" and kernels is not cpu and hasattr(kernels, "host"):
        y = d.run(node, [kernels.host(a) if a is not None else None for a in args], cpu)
        y = kernels.device(np.ascontiguousarray(y))
    else:
        y = d.run(node, args, kernels)
    return fused_activation(node, y, kernels)


def fused_activation(node: Node, y, kernels=cpu):
    """`y` with the node's fused activation (relu/clip bounds, `fold.fuse_activations`) applied."""
    if "act" in node.attrs and y.dtype == np.float32:
        lo, hi = node.attrs["act"]
        y = kernels.clip(y, clip_bound(lo), clip_bound(hi))
    return y


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
        out[name] = contiguous(v)
    extra = sorted(set(feeds) - set(graph.inputs))
    if extra:
        raise CompileError(f"unknown inputs {extra} (inputs: {graph.inputs})")
    return out


def run_graph(graph: Graph, feeds: dict[str, np.ndarray], observer: Observer | None = None,
              keep: bool = False) -> dict[str, np.ndarray]:
    """Every graph output (or, with `keep`, every tensor) computed on the host."""
    env: dict[str, np.ndarray] = dict(graph.consts)
    env.update(check_feeds(graph, feeds))
    last_use, outputs = {}, set(graph.outputs)
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
                if last_use.get(t) == i and t not in outputs and t not in graph.consts:
                    env.pop(t, None)
    return env if keep else {o: env[o] for o in graph.outputs}
