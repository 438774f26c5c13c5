"""Every zoo network compiled for `pynq` emits only instructions whose behaviour on VTA's
HLS design equals vtakit's: the simulators' own checks accept each task's program on
the VTA-semantics configuration (no ACC_8BIT load, WGT padding, ALU reset, 2-D UOP
load or instruction after FINISH), and every SHR amount fits VTA's 5-bit signed field."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler import zoo
from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.isa import Alu, AluOp, Finish, HwConfig, decode_program
from vtakit.sim.decoded import decode_for_sim

PYNQ = HwConfig.preset("pynq")


def check_vta_compatible(cfg: HwConfig, code: bytes, name: str) -> None:
    dram = np.frombuffer(code, np.uint8).copy()
    decode_for_sim(cfg, dram, 0, len(code) // 16)  # SimError for anything VTA runs differently
    insns = decode_program(code, cfg)
    assert isinstance(insns[-1], Finish), name
    for i, insn in enumerate(insns):
        if isinstance(insn, Alu) and insn.op == AluOp.SHR and insn.use_imm:
            assert 0 <= insn.imm <= cfg.shr_max, f"{name}: instruction {i} shifts by {insn.imm}"


@pytest.mark.parametrize("network", zoo.NAMES)
def test_zoo_programs_use_only_vta_behaviour(network: str) -> None:
    assert PYNQ.vta_semantics
    module = compile_module(zoo.build(network), PYNQ)
    tasks = module.vta_tasks()
    assert tasks
    for task in tasks:
        bases = dict.fromkeys(task.program.tensors, 0)
        check_vta_compatible(PYNQ, task.program.link(PYNQ, bases), f"{network}/{task.node}")


@pytest.mark.parametrize("shift", [16, 20, 31])
def test_large_shifts_are_split(shift: int) -> None:
    """VTA reads SHR 16 as -16 (a left shift): the compiler splits shifts beyond 15."""
    op, _ = compile_conv2d(PYNQ, x_shape=(1, 16, 4, 4), w_shape=(16, 16, 1, 1), shift=shift, clip=(-128, 127))
    program = op.program()
    code = program.link(PYNQ, dict.fromkeys(program.tensors, 0))
    check_vta_compatible(PYNQ, code, f"shift {shift}")
    shr = [i.imm for i in decode_program(code, PYNQ) if isinstance(i, Alu) and i.op == AluOp.SHR]
    assert sum(shr) % shift == 0 and max(shr) <= 15
