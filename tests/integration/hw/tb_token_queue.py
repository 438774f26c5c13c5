"""cocotb testbench: a dependency-token queue against a bounded counter, random pushes and pops."""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge


@cocotb.test()
async def random_traffic(dut):
    depth = int(os.environ["VTAKIT_TOKEN_DEPTH"])
    rnd = random.Random(int(os.environ.get("VTAKIT_SEED", "0")))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.push.value = 0
    dut.pop.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    count = 0
    for cycle in range(4 * depth + 2000):
        await FallingEdge(dut.clk)
        assert int(dut.can_pop.value) == (count > 0), f"cycle {cycle}: can_pop with {count} tokens"
        assert int(dut.can_push.value) == (count < depth), f"cycle {cycle}: can_push with {count} tokens"
        phase = (cycle // 300) % 3          # filling, draining, mixed
        want_push = rnd.random() < (0.9 if phase == 0 else 0.1 if phase == 1 else 0.5)
        want_pop = rnd.random() < (0.1 if phase == 0 else 0.9 if phase == 1 else 0.5)
        push = want_push and count < depth
        pop = want_pop and count > 0
        dut.push.value = int(push)
        dut.pop.value = int(pop)
        count += int(push) - int(pop)
    await FallingEdge(dut.clk)
    assert int(dut.can_pop.value) == (count > 0)
