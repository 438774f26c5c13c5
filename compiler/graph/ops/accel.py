"""The accelerator forms of the ops the accelerator takes: each node's operator program and how its
tensors bind (the `lower` rule of an OpDef; `compiler.graph.lower` wraps the result into a task)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.vta.ops import compile_conv2d, compile_eltwise
from vtakit.compiler.vta.runtime import pack_bias, pack_weight
from vtakit.compiler.vta.te import split_channel_shift
from vtakit.isa.config import HwConfig


@dataclass
class AccelProgram:
    """One node compiled for the accelerator, before its tensors are bound to DRAM buffers."""

    op: Any                            # the compiled operator (its .program() is what the task runs)
    schedule: Any                      # the schedule it was compiled with
    consts: dict[str, np.ndarray]      # program tensor -> packed constant
    acts: dict[str, str]               # program tensor -> graph activation it reads
    macs: int


def nchw(shape: tuple[int, ...]) -> tuple[int, int, int, int] | None:
    """Dense-layer tensors (N, C) are 1x1 images on the accelerator."""
    return tuple(shape) + (1,) * (4 - len(shape)) if len(shape) in (2, 4) else None


def lower_linear(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """QConv and QDense: a GEMM over packed weights with the requantizing epilogue."""
    a = n.attrs
    x_shape = nchw(g.tensors[n.inputs[0]].shape)
    w = g.consts[n.inputs[1]]
    w4 = w.reshape(w.shape + (1, 1)) if w.ndim == 2 else w
    has_bias = len(n.inputs) > 2 and bool(n.inputs[2])
    stride = a["strides"][0] if n.op == "QConv" else 1
    pad = a["pads"][0] if n.op == "QConv" else 0
    shift, shift_vector = a.get("shift"), None
    if isinstance(shift, tuple):  # per output channel: an immediate common part, a vector in acc
        shift, shift_vector = split_channel_shift(cfg, shift, n.name)
    op, used = compile_conv2d(cfg, x_shape=x_shape, w_shape=w4.shape, stride=stride, padding=pad,
                              bias=has_bias, shift=shift, clip=tuple(a["clip"]) if "clip" in a else None,
                              schedule=schedule, channel_shift=shift_vector is not None, name=n.name)
    consts = {"weight": pack_weight(w4, cfg.block_out, cfg.block_in)}
    if has_bias:
        consts["bias"] = pack_bias(g.consts[n.inputs[2]], cfg.batch, cfg.block_out)
    if shift_vector is not None:
        consts["shift"] = pack_bias(shift_vector, cfg.batch, cfg.block_out)
    o_shape = nchw(g.tensors[n.outputs[0]].shape)
    macs = int(np.prod(o_shape, dtype=np.int64)) * x_shape[1] * w4.shape[2] * w4.shape[3]
    return AccelProgram(op, used, consts, {"data": n.inputs[0]}, macs)


def lower_add(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """QAdd: the saturating residual add on the tensor ALU."""
    a = n.attrs
    op, used = compile_eltwise(cfg, "add", shape=nchw(g.tensors[n.inputs[0]].shape), inputs=("a", "b"),
                               shift=a.get("shift") or None, clip=tuple(a["clip"]), schedule=schedule, name=n.name)
    return AccelProgram(op, used, {}, {"a": n.inputs[0], "b": n.inputs[1]}, 0)


def lower_relu(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """Relu of an int8 tensor: ALU MAX with 0."""
    op, used = compile_eltwise(cfg, "relu", shape=nchw(g.tensors[n.inputs[0]].shape), inputs=("a",),
                               schedule=schedule, name=n.name)
    return AccelProgram(op, used, {}, {"a": n.inputs[0]}, 0)


def lower_maxpool(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """Square, symmetric MaxPool of an int8 tensor: ALU MAX over the window."""
    a = n.attrs
    window = (a["kernel"][0], a["strides"][0], a["pads"][0])
    op, used = compile_eltwise(cfg, "max_pool2d", shape=nchw(g.tensors[n.inputs[0]].shape), inputs=("data",),
                               window=window, schedule=schedule, name=n.name)
    return AccelProgram(op, used, {}, {"data": n.inputs[0]}, 0)
