"""cocotb testbench: the GEMM core against numpy on random operands, a new micro-op every cycle
(its sums come out three clock edges after its operands; the accumulator value joins then)."""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, Timer

from vtakit.isa import HwConfig


def _pack(values: np.ndarray, bits: int) -> int:
    word = 0
    for k, v in enumerate(values.reshape(-1).tolist()):
        word |= (int(v) & ((1 << bits) - 1)) << (k * bits)
    return word


def _unpack(word: int, n: int, bits: int) -> np.ndarray:
    vals = [(word >> (k * bits)) & ((1 << bits) - 1) for k in range(n)]
    return np.array([v - (1 << bits) if v >> (bits - 1) else v for v in vals], dtype=np.int64)


@cocotb.test()
async def random_products(dut):
    cfg = HwConfig.from_json(os.environ["VTAKIT_CONFIG_JSON"])
    rng = np.random.default_rng(int(os.environ.get("VTAKIT_SEED", "0")))
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    lo_i, hi_i = -(1 << (cfg.inp_bits - 1)), 1 << (cfg.inp_bits - 1)
    lo_w, hi_w = -(1 << (cfg.wgt_bits - 1)), 1 << (cfg.wgt_bits - 1)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    trials, depth = 200, 3
    ops = []
    for trial in range(trials):
        # extremes first, then random operands
        if trial == 0:
            inp, wgt = np.full((b, bi), lo_i), np.full((bo, bi), lo_w)
        else:
            inp, wgt = rng.integers(lo_i, hi_i, (b, bi)), rng.integers(lo_w, hi_w, (bo, bi))
        ops.append((inp, wgt, rng.integers(-(1 << 31), 1 << 31, (b, bo))))
    for cycle in range(trials + depth):
        if cycle < trials:
            dut.inp.value = _pack(ops[cycle][0], cfg.inp_bits)
            dut.wgt.value = _pack(ops[cycle][1], cfg.wgt_bits)
        if cycle >= depth:
            inp, wgt, acc = ops[cycle - depth]
            dut.acc_in.value = _pack(acc, cfg.acc_bits)
            await Timer(1, unit="ns")
            expect = (acc + inp @ wgt.T).astype(np.int64)
            expect = ((expect + (1 << 31)) % (1 << 32)) - (1 << 31)   # int32 wraparound
            got = _unpack(int(dut.acc_out.value), b * bo, cfg.acc_bits).reshape(b, bo)
            assert np.array_equal(got, expect), f"trial {cycle - depth}: got {got}, expected {expect}"
        await RisingEdge(dut.clk)
