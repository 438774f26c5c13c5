"""Accelerator tasks: one quantized node -> one relocatable Program plus how its tensors bind.

A task's program names its tensors locally ("data", "weight", "bias", "a", "b",
"out", "uops"); `bind` says what each is in the network: an activation of the
graph in the packed layout of a given block (`ActBuffer`), a packed constant, or
the task's own micro-op table.  The planner turns those into DRAM offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.vta.ops import compile_conv2d, compile_eltwise
from vtakit.compiler.vta.program import Program
from vtakit.compiler.vta.runtime import pack_bias, pack_weight
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId


@dataclass(frozen=True)
class ActBuffer:
    """A graph activation in DRAM, packed as NCHW{batch}n{block}c (int32 outputs as four byte planes)."""

    tensor: str
    block: int
    planes: int = 1

    @property
    def key(self) -> str:
        return f"act:{self.tensor}@{self.block}" + (f"x{self.planes}" if self.planes > 1 else "")


@dataclass
class VtaTask:
    node: str
    op: str
    program: Program
    bind: dict[str, str]  # program tensor -> buffer key (act:..., const:..., uops:<node>)
    acts: dict[str, ActBuffer]  # program tensor -> activation buffer, for the activation bindings
    macs: int
    schedule: dict

    @property
    def inputs(self) -> list[ActBuffer]:
        return [b for t, b in self.acts.items() if t != self.program.output]

    @property
    def output(self) -> ActBuffer:
        return self.acts[self.program.output]


def nchw(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Dense-layer tensors (N, C) are 1x1 images on the accelerator."""
    return tuple(shape) + (1,) * (4 - len(shape)) if len(shape) in (2, 4) else None


def _block(cfg: HwConfig, mem: MemId) -> int:
    return cfg.block_in if mem == MemId.INP else cfg.block_out


def lower_node(g: Graph, n: Node, cfg: HwConfig, consts: dict[str, np.ndarray],
               schedule: dict | None = None) -> VtaTask:
    """Compile one accelerator node; packed constants are added to `consts` (key -> uint8 bytes)."""
    a = n.attrs
    out_info = g.tensors[n.outputs[0]]
    const_inputs: dict[str, np.ndarray] = {}
    if n.op in ("QConv", "QDense"):
        x_shape = nchw(g.tensors[n.inputs[0]].shape)
        w = g.consts[n.inputs[1]]
        w4 = w.reshape(w.shape + (1, 1)) if w.ndim == 2 else w
        has_bias = len(n.inputs) > 2 and bool(n.inputs[2])
        stride = a["strides"][0] if n.op == "QConv" else 1
        pad = a["pads"][0] if n.op == "QConv" else 0
        op, used = compile_conv2d(cfg, x_shape=x_shape, w_shape=w4.shape, stride=stride, padding=pad,
                                  bias=has_bias, shift=a.get("shift"), clip=tuple(a["clip"]) if "clip" in a else None,
                                  schedule=schedule, name=n.name)
        const_inputs["weight"] = pack_weight(w4, cfg.block_out, cfg.block_in)
        if has_bias:
            const_inputs["bias"] = pack_bias(g.consts[n.inputs[2]], cfg.batch, cfg.block_out)
        act_inputs = {"data": n.inputs[0]}
        o_shape = nchw(out_info.shape)
        macs = int(np.prod(o_shape, dtype=np.int64)) * x_shape[1] * w4.shape[2] * w4.shape[3]
    elif n.op in ("QAdd", "Relu", "MaxPool"):
        shape = nchw(g.tensors[n.inputs[0]].shape)
        if n.op == "QAdd":
            op, used = compile_eltwise(cfg, "add", shape=shape, inputs=("a", "b"), shift=a.get("shift") or None,
                                       clip=tuple(a["clip"]), schedule=schedule, name=n.name)
            act_inputs = {"a": n.inputs[0], "b": n.inputs[1]}
        elif n.op == "Relu":
            op, used = compile_eltwise(cfg, "relu", shape=shape, inputs=("a",), schedule=schedule, name=n.name)
            act_inputs = {"a": n.inputs[0]}
        else:
            window = (a["kernel"][0], a["strides"][0], a["pads"][0])
            op, used = compile_eltwise(cfg, "max_pool2d", shape=shape, inputs=("data",), window=window,
                                       schedule=schedule, name=n.name)
            act_inputs = {"data": n.inputs[0]}
        macs = 0
    else:
        raise CompileError("the accelerator has no task for this op", node=n.name, op=n.op)
    program = op.program()
    bind, acts = {}, {}
    for tname, spec in program.tensors.items():
        if tname == "uops":
            bind[tname] = f"uops:{n.name}"
            consts[bind[tname]] = program.uops
        elif tname in const_inputs:
            key = f"const:{n.name}.{tname}"
            data = np.ascontiguousarray(const_inputs[tname]).view(np.uint8).reshape(-1)
            if data.size != spec.nbytes(cfg):
                raise CompileError(f"packed {tname} has {data.size} bytes, the program expects {spec.nbytes(cfg)}",
                                   node=n.name, op=n.op)
            consts[key] = data
            bind[tname] = key
        else:
            tensor = act_inputs.get(tname, n.outputs[0] if tname == program.output else None)
            if tensor is None:
                raise CompileError(f"program tensor {tname!r} has no binding", node=n.name, op=n.op)
            buf = ActBuffer(tensor, _block(cfg, spec.mem), spec.planes)
            acts[tname] = buf
            bind[tname] = buf.key
    sched = used.to_dict() if hasattr(used, "to_dict") else {}
    return VtaTask(n.name, n.op, program, bind, acts, macs, sched)
