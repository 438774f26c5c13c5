"""cocotb testbench: the tensor ALU against the simulators' lane semantics, every operation."""

import os

import cocotb
import numpy as np
from cocotb.triggers import Timer
from tb_gemm_core import _pack, _unpack

from vtakit.isa import AluOp, HwConfig
from vtakit.sim.kernels import alu_apply


@cocotb.test()
async def every_operation(dut):
    cfg = HwConfig.from_json(os.environ["VTAKIT_CONFIG_JSON"])
    rng = np.random.default_rng(int(os.environ.get("VTAKIT_SEED", "0")))
    lanes = cfg.batch * cfg.block_out
    ops = [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR] + ([AluOp.MUL] if cfg.alu_mul else [])
    edge = np.array([0, 1, -1, (1 << 31) - 1, -(1 << 31), 31, -32, 32, 40, -40, 7, -8], dtype=np.int64)
    for trial in range(300):
        op = ops[trial % len(ops)]
        a = rng.integers(-(1 << 31), 1 << 31, lanes)
        if trial % 3 == 0:
            b = rng.choice(edge, lanes)
        elif op == AluOp.SHR:
            b = rng.integers(-64, 64, lanes)
        else:
            b = rng.integers(-(1 << 31), 1 << 31, lanes)
        dut.op.value = int(op)
        dut.a.value = _pack(a, cfg.acc_bits)
        dut.b.value = _pack(b, cfg.acc_bits)
        await Timer(1, unit="ns")
        expect = alu_apply(op, a.astype(np.int32), b.astype(np.int32), np.dtype(np.int32), cfg.shr_arg_bits)
        got = _unpack(int(dut.y.value), lanes, cfg.acc_bits)
        assert np.array_equal(got, expect.astype(np.int64)), f"{op.name} a={a} b={b}: got {got}, expected {expect}"
