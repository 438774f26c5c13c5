"""The cycle model's cost rules, computed for a whole program at once.

Every instruction's duration is a function of its fields and the HwConfig alone,
so it is computed up front with numpy; the event simulation in `cycle.py` then
only decides *when* each instruction runs.  The rules (also in the user guide's Simulators page):

* Memory port: one, shared by fetch, load, compute and store; requests are
  served first-come first-served and a DMA instruction holds the port for its
  whole duration.  A row of B bytes at byte address a is split into bursts at
  every `burst_bytes`-aligned boundary; each burst costs `mem_latency` cycles and
  each bus beat one cycle: bursts * mem_latency + (ceil((a+B)/bus) - floor(a/bus)),
  but no faster than one element per cycle (the on-chip buffer's write port);
  a burst of elements narrower than a beat takes one cycle more on a LOAD (the
  last beat is unpacked from a register) and two on a STORE (elements are
  packed into a beat register, read one cycle after they are asked for).
* LOAD / STORE with x_size > 0: 1 issue cycle + one cycle per zero-padding
  element + the cost of every row.  x_size == 0: 1 cycle, no port.
* GEMM: 1 + micro-ops + gemm_pipeline (1 if it has no micro-ops).  Reset
  micro-ops cost the same as multiply-accumulate ones.
* ALU: 1 + micro-ops * alu_ii + alu_pipeline (1 if it has no micro-ops); micro-ops
  reading a second accumulator entry (no immediate) take 2 * alu_ii: the
  accumulator has one read port.
* FINISH: 1.
* Fetch: reads instructions in bursts (never across a burst boundary); each
  instruction is dispatched one cycle after the previous one at the earliest,
  and not before its last beat has arrived.
"""

from __future__ import annotations

import numpy as np

from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId, Opcode


def elem_bytes_table(cfg: HwConfig) -> np.ndarray:
    """Element bytes indexed by mem_id (unknown ids map to 1; they never run)."""
    table = np.ones(8, dtype=np.int64)
    for m in MemId:
        table[m] = cfg.elem_bytes(m)
    return table


def row_cost(cfg: HwConfig, addr: np.ndarray, nbytes: np.ndarray, elems: np.ndarray | int = 0,
             narrow: np.ndarray | int = 0) -> np.ndarray:
    """Port cycles to move one contiguous row of `nbytes` (`elems` elements) at byte `addr`.

    Data moves at one bus beat per cycle, but an on-chip buffer takes one element
    per cycle, so rows of elements narrower than the bus go at the element rate,
    and each of their bursts takes `narrow` cycles more: a load unpacks the held
    last beat one cycle late, a store packs elements into a beat register first."""
    bb, bw = cfg.burst_bytes, cfg.bus_bytes
    last = addr + nbytes - 1
    bursts = last // bb - addr // bb + 1
    beats = last // bw - addr // bw + 1
    return bursts * (cfg.mem_latency + np.asarray(narrow, dtype=np.int64)) + np.maximum(beats, elems)


def static_costs(cfg: HwConfig, opcode: np.ndarray, mem: dict[str, np.ndarray],
                 loop: dict[str, np.ndarray], use_imm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(duration in cycles, holds the memory port) for every instruction; `loop` holds the
    GEMM/ALU loop fields, `use_imm` the ALU immediate flag."""
    n = opcode.size
    duration = np.ones(n, dtype=np.int64)
    port = np.zeros(n, dtype=bool)

    is_mem = ((opcode == Opcode.LOAD) | (opcode == Opcode.STORE)) & (mem["x_size"] > 0)
    idx = np.flatnonzero(is_mem)
    if idx.size:
        eb = elem_bytes_table(cfg)[np.minimum(mem["mem_id"][idx], 7)]
        # A LOAD or STORE that executes moves at most a buffer's worth of rows;
        # larger ones fail when they run, so their cost need not be exact.
        y = np.minimum(mem["y_size"][idx], max(cfg.depth(m) for m in MemId))
        x, stride = mem["x_size"][idx], mem["x_stride"][idx]
        xp = mem["x_pad_0"][idx] + mem["x_pad_1"][idx]
        yp = mem["y_pad_0"][idx] + mem["y_pad_1"][idx]
        pad_elems = yp * (x + xp) + y * xp
        # One entry per DRAM row, summed back per instruction.
        counts = y.astype(np.intp, copy=False)  # repeat counts must be intp (int32 on 32-bit ARM)
        owner = np.repeat(np.arange(idx.size), counts)
        first = np.repeat(np.cumsum(y) - y, counts)
        r = np.arange(owner.size) - first
        addr = (mem["dram_base"][idx] * eb)[owner] + r * (stride * eb)[owner]
        narrow = (eb < cfg.bus_bytes) * np.where(opcode[idx] == Opcode.STORE, 2, 1)
        rows = row_cost(cfg, addr, (x * eb)[owner], x[owner], narrow[owner])
        transfer = np.bincount(owner.astype(np.intp, copy=False), weights=rows, minlength=idx.size).astype(np.int64)
        duration[idx] = 1 + pad_elems + transfer
        port[idx] = y > 0

    is_loop = (opcode == Opcode.GEMM) | (opcode == Opcode.ALU)
    uops = loop["iter_out"] * loop["iter_in"] * np.maximum(loop["uop_end"] - loop["uop_bgn"], 0)
    gemm = (opcode == Opcode.GEMM) & (uops > 0)
    alu = (opcode == Opcode.ALU) & (uops > 0)
    duration[gemm] = 1 + uops[gemm] + cfg.gemm_pipeline
    # The accumulator has one read port: an operand from it costs a second read.
    per_uop = np.where(use_imm != 0, 1, 2) * cfg.alu_ii
    duration[alu] = 1 + uops[alu] * per_uop[alu] + cfg.alu_pipeline
    duration[is_loop & (uops == 0)] = 1
    return duration, port


def fetch_burst(cfg: HwConfig, addr: int, remaining: int) -> int:
    """Instructions the next fetch burst reads (up to the burst boundary)."""
    room = (cfg.burst_bytes - addr % cfg.burst_bytes) // 16
    return max(1, min(remaining, room))


def beats_until(cfg: HwConfig, addr: int, nbytes: int) -> int:
    """Bus beats from `addr` up to and including byte `addr + nbytes - 1`."""
    bw = cfg.bus_bytes
    return (addr + nbytes - 1) // bw - addr // bw + 1
