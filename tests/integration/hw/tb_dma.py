"""cocotb testbenches: the read DMA (LOAD with padding) and the write DMA (STORE), each
against a numpy model of ISA.md, with an AXI memory that answers after the configured
latency, one beat per cycle."""

import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from vtakit.isa import HwConfig, MemId

DRAM_BYTES = 1 << 16


def _config() -> HwConfig:
    return HwConfig.from_json(os.environ["VTAKIT_CONFIG_JSON"])


async def _reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.gnt.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


def _beat(dram: np.ndarray, addr: int, bus: int) -> int:
    return int.from_bytes(dram[addr:addr + bus].tobytes(), "little")


@cocotb.test()
async def load_with_padding(dut):
    """Random 2-D loads of several element sizes with padding on every side."""
    cfg = _config()
    bus, lat = cfg.bus_bytes, cfg.mem_latency
    rnd = random.Random(int(os.environ.get("VTAKIT_SEED", "0")))
    max_elem = int(os.environ["VTAKIT_ELEM_MAX"])
    kinds = [m for m in (MemId.UOP, MemId.INP, MemId.ACC_8BIT, MemId.ACC, MemId.WGT)
             if cfg.elem_bytes(m) <= max_elem]
    dram = np.frombuffer(np.random.default_rng(1).bytes(DRAM_BYTES), dtype=np.uint8).copy()
    await _reset(dut)
    for trial in range(40):
        mem = kinds[trial % len(kinds)]
        eb = cfg.elem_bytes(mem)
        y, x = rnd.randint(0, 4), rnd.randint(1, 6)
        stride = x + rnd.randint(0, 3)
        pads = [rnd.randint(0, 3) for _ in range(4)]
        base = rnd.randint(0, (DRAM_BYTES // 2) // eb)
        sram = rnd.randint(0, 64)
        rows, cols = pads[0] + y + pads[1], pads[2] + x + pads[3]
        expect = {}
        for r in range(rows):
            for c in range(cols):
                if pads[0] <= r < pads[0] + y and pads[2] <= c < pads[2] + x:
                    a = (base + (r - pads[0]) * stride + (c - pads[2])) * eb
                    expect[sram + r * cols + c] = int.from_bytes(dram[a:a + eb].tobytes(), "little")
                else:
                    expect[sram + r * cols + c] = 0
        await FallingEdge(dut.clk)
        dut.elem_log2.value = eb.bit_length() - 1
        dut.dram_addr.value = base * eb
        dut.sram_base.value = sram
        dut.y_size.value, dut.x_size.value, dut.x_stride.value = y, x, stride
        dut.y_pad_0.value, dut.y_pad_1.value, dut.x_pad_0.value, dut.x_pad_1.value = pads
        dut.start.value = 1
        await FallingEdge(dut.clk)
        dut.start.value = 0
        bursts, now, got = [], 0, {}
        for _ in range(20000):
            # drive this cycle's read data, then see what the DUT does with it
            dut.ar_ready.value = 1
            if bursts and now >= bursts[0][2]:
                addr, beats, _, sent = bursts[0]
                dut.r_valid.value = 1
                dut.r_data.value = _beat(dram, addr + sent * bus, bus)
                dut.r_last.value = int(sent + 1 == beats)
                dut.r_resp.value = 0
            else:
                dut.r_valid.value = 0
                dut.r_last.value = 0
            await ReadOnly()
            if int(dut.wr_en.value):
                got[int(dut.wr_addr.value)] = int(dut.wr_data.value) & ((1 << (8 * eb)) - 1)
            done = int(dut.done.value)
            if bursts and now >= bursts[0][2] and int(dut.r_ready.value):
                bursts[0][3] += 1
                if bursts[0][3] == bursts[0][1]:
                    bursts.pop(0)
            if int(dut.ar_valid.value):
                bursts.append([int(dut.ar_addr.value), int(dut.ar_len.value) + 1, now + lat, 0])
            await FallingEdge(dut.clk)
            now += 1
            if done:
                break
        assert done, f"trial {trial}: no done"
        assert got == expect, f"trial {trial} {mem.name} y={y} x={x} pads={pads}: written entries differ"


@cocotb.test()
async def store_strided(dut):
    """Random strided stores, overlapping rows included (later rows win)."""
    cfg = _config()
    bus, lat = cfg.bus_bytes, cfg.mem_latency
    eb = cfg.elem_bytes(MemId.OUT)
    rnd = random.Random(int(os.environ.get("VTAKIT_SEED", "0")))
    sram = [int.from_bytes(np.random.default_rng(k).bytes(eb), "little") for k in range(256)]
    await _reset(dut)
    for trial in range(40):
        y, x = rnd.randint(1, 4), rnd.randint(1, 6)
        stride = max(1, x + rnd.randint(-1 if y > 1 else 0, 3))
        base = rnd.randint(0, 4096 // eb)
        sbase = rnd.randint(0, 128)
        dram = bytearray(DRAM_BYTES)
        expect = bytearray(DRAM_BYTES)
        for r in range(y):
            for c in range(x):
                a = (base + r * stride + c) * eb
                expect[a:a + eb] = sram[sbase + r * x + c].to_bytes(eb, "little")
        await FallingEdge(dut.clk)
        dut.dram_addr.value = base * eb
        dut.sram_base.value = sbase
        dut.y_size.value, dut.x_size.value, dut.x_stride.value = y, x, stride
        dut.start.value = 1
        await FallingEdge(dut.clk)
        dut.start.value = 0
        now, rd_data, aw, b_at, done = 0, 0, None, None, 0
        for _ in range(20000):
            dut.rd_data.value = rd_data
            dut.aw_ready.value = int(aw is None)
            dut.w_ready.value = int(b_at is None)
            dut.b_valid.value = int(b_at is not None and now >= b_at)
            dut.b_resp.value = 0
            await ReadOnly()
            done = int(dut.done.value)
            if int(dut.rd_en.value):
                next_data = sram[int(dut.rd_addr.value)]
            else:
                next_data = rd_data
            if aw is None and int(dut.aw_valid.value):
                aw = [int(dut.aw_addr.value), 0]
            if b_at is None and int(dut.w_valid.value):
                addr = aw[0] + aw[1] * bus
                data, strb = int(dut.w_data.value), int(dut.w_strb.value)
                for k in range(bus):
                    if strb >> k & 1:
                        dram[addr + k] = data >> (8 * k) & 0xFF
                aw[1] += 1
                if int(dut.w_last.value):
                    b_at = now + lat
            if b_at is not None and now >= b_at and int(dut.b_ready.value):
                aw, b_at = None, None
            await FallingEdge(dut.clk)
            rd_data = next_data
            now += 1
            if done:
                break
        assert done, f"trial {trial}: no done"
        assert dram == expect, f"trial {trial} y={y} x={x} stride={stride}: DRAM differs"
