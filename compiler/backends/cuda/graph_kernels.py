"""The GPU as the graph executor's host backend, and the compile-time list of a module's GPU kernels.

`GpuKernels` exposes the CPU backend's function names bound to one GPU backend,
so `ops.execute.run_node(node, args, kernels)` runs a node on the GPU with
the very code that runs it on the CPU.  Values stay on the device between
nodes; a module's constants are uploaded once and kept for its lifetime.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from vtakit.compiler.backends.cuda import conv, elementwise, gemm, layout, linear, pool, reduce
from vtakit.compiler.backends.cuda.device_array import DeviceArray, GpuBackend
from vtakit.compiler.backends.cuda.record import Recorder
from vtakit.compiler.backends.cuda.target import DEFAULT_ARCH
from vtakit.compiler.ops import op_def
from vtakit.compiler.ops.execute import fused_activation, run_node

OPERATORS: dict[str, Callable[..., Any]] = {
    "conv2d": conv.conv2d, "dense": linear.dense, "matmul": gemm.matmul,
    "add": elementwise.add, "sub": elementwise.sub, "mul": elementwise.mul, "relu": elementwise.relu,
    "clip": elementwise.clip, "add_int8": elementwise.add_int8, "quantize": elementwise.quantize,
    "dequantize": elementwise.dequantize, "quantize_linear": elementwise.quantize_linear,
    "dequantize_linear": elementwise.dequantize_linear, "batch_norm": elementwise.batch_norm,
    "max_pool2d": pool.max_pool2d, "avg_pool2d": pool.avg_pool2d, "global_avg_pool": pool.global_avg_pool,
    "softmax": reduce.softmax, "transpose": layout.transpose, "pad": layout.pad, "concat": layout.concat,
    "pack_activation": layout.pack_activation, "unpack_activation": layout.unpack_activation,
}
HOST_OPERANDS: dict[str, tuple[int, ...]] = {"batch_norm": (1, 2, 3, 4)}
"""Operands an operator reads on the host (batch norm folds its statistics into one factor there): a
constant one is passed as it is, never uploaded (so the compile-time recorder, which holds no data,
can plan the node too)."""


class GpuKernels:
    """compiler.backends.cpu's kernel names, bound to one GPU backend (numpy operands are moved to the device)."""

    def __init__(self, backend: GpuBackend, constants: Iterable[np.ndarray] = ()):
        self.backend = backend
        self.label = backend.label
        self._constants: dict[int, tuple[np.ndarray, DeviceArray | None]] = {id(c): (c, None) for c in constants}
        for name, function in OPERATORS.items():
            setattr(self, name, functools.partial(self._call, function, HOST_OPERANDS.get(name, ())))

    def device(self, value: np.ndarray | DeviceArray) -> DeviceArray:
        """`value` on the device: a registered constant is uploaded once, anything else every time."""
        if isinstance(value, DeviceArray):
            return value
        entry = self._constants.get(id(value))
        if entry is None:
            return self.backend.upload(np.ascontiguousarray(value))
        array, uploaded = entry
        if uploaded is None:
            uploaded = self.backend.upload(np.ascontiguousarray(array))
            self._constants[id(value)] = (array, uploaded)
        return uploaded

    @staticmethod
    def host(value: np.ndarray | DeviceArray) -> np.ndarray:
        return value.numpy() if isinstance(value, DeviceArray) else value

    def synchronize(self) -> None:
        self.backend.synchronize()

    def _move(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return self.device(value)
        if isinstance(value, (list, tuple)) and any(isinstance(v, (np.ndarray, DeviceArray)) for v in value):
            return [self._move(v) for v in value]
        return value

    def _call(self, function: Callable[..., Any], host: tuple[int, ...], *args: Any, **options: Any) -> Any:
        return function(*(a if i in host else self._move(a) for i, a in enumerate(args)), gpu=self.backend,
                        **options)


def record_launches(graph, nodes: Iterable[str] | None = None, arch: str = DEFAULT_ARCH) -> dict[str, Any]:
    """{arch, kernels: {node: [launch, ...]}, ptx_kernels} for the GPU nodes of `graph` (all when None).

    Runs each node's operator code on a `Recorder` with placeholders of the
    declared shapes, so every kernel's PTX is generated now.  A node without GPU code (numpy or
    onnx.reference: it runs on host copies) launches nothing but its fused activation.
    """
    recorder = Recorder(arch)
    kernels = GpuKernels(recorder, graph.consts.values())
    chosen = None if nodes is None else set(nodes)
    env: dict[str, Any] = {}

    def value(tensor: str) -> Any:
        if tensor in env:
            return env[tensor]
        if tensor in graph.consts:
            return graph.consts[tensor]
        info = graph.tensors[tensor]
        return recorder.empty(info.shape, info.dtype)

    for node in graph.nodes:
        if chosen is not None and node.name not in chosen:
            continue
        recorder.node = node.name
        recorder.launches.setdefault(node.name, [])
        if op_def(node.op, node).kernel != "llvmlite":
            info = graph.tensors[node.outputs[0]]
            env[node.outputs[0]] = fused_activation(node, recorder.empty(info.shape, info.dtype), kernels)
            continue
        env[node.outputs[0]] = run_node(node, [value(t) if t else None for t in node.inputs], kernels)
    return dict(arch=arch, ptx_kernels=len(recorder.ptx),
                kernels={node: [r.to_dict() for r in records] for node, records in recorder.launches.items()})
