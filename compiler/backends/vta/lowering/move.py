"""int8 tensors into the accumulator without LOAD.ACC8: an INP load plus an identity GEMM.

VTA's hardware has no LOAD of memory type ACC_8BIT (acc8_load false), so the
operators that read int8 activations in the acc scope (max pooling, the
residual add, relu) would have to leave the accelerator.  Instead the tile is
loaded into an INP staging slot (padding included, exactly as LOAD.ACC8 would
lay it out), the acc slot is cleared by a GEMM reset, and a GEMM against an
identity weight block, loaded once per task, adds each int8 lane into its
accumulator lane: acc[o] = sum_i inp[i] * (i == o) = inp[o], sign-extended,
bit for bit what LOAD.ACC8 writes.  GEMM, GEMM reset and INP/WGT loads are all
instructions VTA's hardware implements.  An operand that is only added to the
output tile (the residual add) skips its acc slot: the identity GEMM adds its
INP tile straight into the output (acc += x is the ALU ADD's result).

It needs INP and ACC_8BIT elements of one shape (block_in == block_out), so a
packed int8 activation reads the same as either; `te.move_reason` says when not.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.lowering.tensorize import IntrinsicCall
from vtakit.compiler.backends.vta.te import ComputeDef
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp, MemId

IDENTITY = "identity"
"""The program tensor holding the identity weight block (one WGT element)."""
STAGE = "@inp"
"""Suffix of the INP staging slot of a moved tensor."""


def moves_int8(cfg: HwConfig) -> bool:
    """Whether int8 tensors reach the accumulator by INP load + identity GEMM (no LOAD.ACC8)."""
    return not cfg.acc8_load


def identity_weight(cfg: HwConfig, bits: int = 0) -> np.ndarray:
    """The packed identity weight block, (1, block_out, block_in) int8; times 2**bits for a task whose
    fused residual operand enters scaled (`ComputeDef.residual_bits`, quant/techniques/wide_residual.py): the
    scale costs nothing there, the GEMM multiplies anyway."""
    return (np.eye(cfg.block_out, cfg.block_in, dtype=np.int8) << bits)[None]


def stage_name(tensor: str) -> str:
    return tensor + STAGE


def moved_calls(acc_base: int, inp_base: int, wgt_base: int, size: int) -> tuple[IntrinsicCall, IntrinsicCall]:
    """The GEMM reset and the identity GEMM moving `size` staged entries into the acc slot."""
    loops = (("m", size),)
    dst = Affine.var("m") + acc_base
    return (IntrinsicCall("reset", loops, dst),
            IntrinsicCall("gemm", loops, dst, src=Affine.var("m") + inp_base, wgt=Affine.of(wgt_base)))


def direct_operands(compute: ComputeDef, cfg: HwConfig) -> list[str]:
    """int8 operands of an ADD step: the identity GEMM adds their INP tile straight into the output
    tile (acc += x), so they need neither an acc slot, nor a reset, nor the ALU ADD."""
    if not moves_int8(cfg):
        return []
    return sorted({s.operand.tensor.name for s in compute.steps
                   if s.op == AluOp.ADD and s.operand is not None and s.operand.tensor.mem == MemId.ACC_8BIT})


def moved_tensors(compute: ComputeDef, cfg: HwConfig) -> list[str]:
    """The int8 tensors that reach an acc slot through an INP staging slot and the identity GEMM."""
    if not moves_int8(cfg):
        return []
    direct = direct_operands(compute, cfg)
    return sorted(t for t, tensor in compute.tensors().items() if tensor.mem == MemId.ACC_8BIT and t not in direct)


def added_call(call: IntrinsicCall, wgt_base: int) -> IntrinsicCall:
    """An ALU ADD of a direct operand (its src in INP) as the identity GEMM into the same destination."""
    return IntrinsicCall("gemm", call.loops, call.dst, src=call.src, wgt=Affine.of(wgt_base))
