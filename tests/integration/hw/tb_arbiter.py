"""cocotb testbench: the memory-port arbiter against a Python model of its first-come,
first-served queue (an ordered list, same-cycle arrivals in client order), random requests."""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, Timer


class ListQueue:
    """The queue as VTA's port arbitration is specified: the head holds the port while it requests."""

    def __init__(self, n: int) -> None:
        self.n, self.order = n, []

    def grant(self, req: list[bool]) -> int | None:
        if self.order and req[self.order[0]]:
            return self.order[0]
        if len(self.order) > 1:
            return self.order[1]
        return next((c for c in range(self.n) if req[c]), None)

    def step(self, req: list[bool]) -> None:
        if self.order and not req[self.order[0]]:
            self.order.pop(0)
        self.order += [c for c in range(self.n) if req[c] and c not in self.order]


@cocotb.test()
async def random_requests(dut):
    n = len(dut.req)
    rnd = random.Random(int(os.environ.get("VTAKIT_SEED", "0")))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.req.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    model, req, grants = ListQueue(n), [False] * n, set()
    for cycle in range(6000):
        # clients mostly hold a request for a while (a burst or an instruction); some drop
        # theirs while queued behind others (a halted fetch), which the queue must also order
        hold = 0.9 if (cycle // 500) % 2 == 0 else 0.5
        req = [(r and rnd.random() < hold) or (not r and rnd.random() < 0.15) for r in req]
        dut.req.value = sum(1 << c for c in range(n) if req[c])
        await Timer(1, unit="ns")
        want = model.grant(req)
        got = int(dut.gnt.value)
        assert got == (0 if want is None else 1 << want), \
            f"cycle {cycle}: req {req} queue {model.order}: grant {got:#x}, expected client {want}"
        head = model.order[0] if model.order else None
        assert int(dut.holder.value) == (0 if head is None else 1 << head), f"cycle {cycle}: holder"
        grants.add(want)
        model.step(req)
        await FallingEdge(dut.clk)
    assert grants == set(range(n)) | {None}, grants
