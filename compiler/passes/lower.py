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
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.backends.vta.graph_ops import lowering_rule
from vtakit.compiler.backends.vta.lowering import IDENTITY, ONES, identity_weight, ones_input
from vtakit.compiler.backends.vta.program import Program
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId


@dataclass(frozen=True)
class ActBuffer:
    """A graph activation in DRAM, packed as NCHW{batch}n{block}c (int32 outputs as four byte planes)."""

    tensor: str
    block: int
    planes: int = 1
    packing: str = ""
    """A reduction packing the host applies when it writes the tensor (`ReductionPacking.to_spec`)."""

    @property
    def key(self) -> str:
        return (f"act:{self.tensor}@{self.block}" + (f"x{self.planes}" if self.planes > 1 else "")
                + (f"~{self.packing}" if self.packing else ""))


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


def _block(cfg: HwConfig, mem: MemId) -> int:
    return cfg.block_in if mem == MemId.INP else cfg.block_out


def lower_node(g: Graph, n: Node, cfg: HwConfig, consts: dict[str, np.ndarray],
               schedule: dict | None = None) -> VtaTask:
    """Compile one accelerator node through its op's lowering rule (backends/vta/graph_ops.py); packed constants are
    added to `consts` (key -> uint8 bytes)."""
    lower = lowering_rule(n)
    if lower is None:
        raise CompileError("the accelerator has no task for this op", node=n.name, op=n.op)
    lowered = lower(g, n, cfg, schedule)
    op, used, const_inputs, act_inputs, macs = (lowered.op, lowered.schedule, lowered.consts, lowered.acts,
                                                lowered.macs)
    program = op.program()
    bind, acts = {}, {}
    for tname, spec in program.tensors.items():
        if tname == "uops":
            bind[tname] = f"uops:{n.name}"
            consts[bind[tname]] = program.uops
        elif tname == IDENTITY:  # one identity weight block for every task that moves int8 tiles (per scale)
            bits = getattr(getattr(op, "compute", None), "residual_bits", 0)
            bind[tname] = f"const:identity<<{bits}" if bits else "const:identity"
            consts[bind[tname]] = identity_weight(cfg, bits).view(np.uint8).reshape(-1)
        elif tname == ONES:  # one `ones` INP entry for every task that adds its bias by GEMM
            bind[tname] = "const:ones"
            consts[bind[tname]] = ones_input(cfg).view(np.uint8).reshape(-1)
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
            buf = ActBuffer(tensor, _block(cfg, spec.mem), spec.planes, lowered.packings.get(tname, ""))
            acts[tname] = buf
            bind[tname] = buf.key
    sched = used.to_dict() if hasattr(used, "to_dict") else {}
    return VtaTask(n.name, n.op, program, bind, acts, macs, sched)
