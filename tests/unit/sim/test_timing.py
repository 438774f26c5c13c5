"""Cycle counts derived by hand from the cycle model's rules (sim/cost_rules.py).

pynq: memory latency L = 24 cycles per burst, 8 bytes per cycle, bursts end at
2048-byte boundaries, GEMM/ALU pipelines 4 cycles, one ALU micro-op per cycle.
Fetch reads the program in one burst here: the port is held for L + 2 cycles per
instruction and instruction j arrives at L + 2 (j + 1).
"""

import numpy as np
import pytest

import vtakit.sim as sim
from vtakit.isa import Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Store, Uop
from vtakit.isa.image import ProgramBuilder

PYNQ = HwConfig.preset("pynq")
LAT = PYNQ.mem_latency


def _run(cfg, build):
    b = ProgramBuilder(cfg)
    build(b)
    img = b.build()
    room = (cfg.burst_bytes - img.insn_addr % cfg.burst_bytes) // 16
    assert room >= img.insn_count, "test programs are fetched in one burst"
    stats, _ = sim.run_image(img, model="cycle")
    return stats, img


def _fetch_hold(n):
    return LAT + 2 * n


def _row(addr: int, nbytes: int) -> int:
    """Port cycles of one row: a latency per 2048-byte block touched, a cycle per beat."""
    bursts = (addr + nbytes - 1) // 2048 - addr // 2048 + 1
    return bursts * LAT + nbytes // 8


@pytest.mark.parametrize("n", [1, 32, 128])
def test_single_row_load(n):
    def build(b):
        x = b.place_elems(MemId.INP, np.zeros((n, 1, 16), np.int8))
        b.emit(Load(MemId.INP, 0, x, 1, n, n, push_next=True), Finish(pop_prev=True))

    stats, _ = _run(PYNQ, build)
    # The load waits for the fetch burst to release the port, moves n*16 bytes in
    # one burst (1 issue + L + 2n), and FINISH pops its token in the same cycle.
    assert stats.cycles == _fetch_hold(2) + (1 + LAT + 2 * n) + 1
    assert stats.modules["load"].stall_memory == _fetch_hold(2) - (LAT + 2)
    assert stats.bytes_read["INP"] == 16 * n


def test_rows_crossing_a_burst_boundary_and_padding():
    # 3 rows of 100 elements (1600 bytes), stride 128 elements (2048 bytes):
    # row r starts at 2048 r, so no row crosses a boundary; a second load whose
    # rows start 1024 bytes into a burst splits every row in two bursts.
    def build(b):
        x = b.place_elems(MemId.INP, np.zeros((3 * 128 + 64, 1, 16), np.int8))
        assert x * 16 % 2048 == 0
        b.emit(Load(MemId.INP, 0, x, 3, 100, 128, 1, 0, 2, 1),
               Load(MemId.INP, 0, x + 64, 3, 100, 128, push_next=True),
               Load(MemId.UOP, 0, 0, 0, 0, 0, pop_prev=True, push_prev=True),
               Finish())

    stats, _ = _run(PYNQ, build)
    pad = 1 * (2 + 100 + 1) + 3 * 3
    first = 1 + pad + 3 * (LAT + 200)
    second = 1 + 3 * (2 * LAT + 200)
    t0 = _fetch_hold(4)
    # the compute no-op pops the second load's token, FINISH follows (1 + 1).
    assert stats.modules["load"].busy == first + second
    assert stats.cycles == t0 + first + second + 1 + 1


@pytest.mark.parametrize("iters, uops", [((1, 1), 64), ((3, 5), 64), ((2, 7), 1)])
def test_gemm_one_uop_per_cycle_plus_pipeline(iters, uops):
    def build(b):
        u = b.place_uops([Uop(0, 0, 0)] * uops)
        b.emit(Load(MemId.UOP, 0, u, 1, uops, uops), Gemm(0, uops, *iters), Finish())

    stats, _ = _run(PYNQ, build)
    n = iters[0] * iters[1] * uops
    uop_load = 1 + LAT + 1 + uops    # 4-byte micro-ops: one per cycle into the buffer, +1 to unpack the held beat
    assert stats.cycles == _fetch_hold(3) + uop_load + (1 + n + PYNQ.gemm_pipeline) + 1
    assert stats.gemm_uops == n
    assert stats.utilization == pytest.approx(n / stats.cycles)


@pytest.mark.parametrize("alu_ii", [1, 2])
@pytest.mark.parametrize("use_imm", [True, False])
def test_alu_initiation_interval(alu_ii, use_imm):
    cfg = PYNQ.replace(alu_ii=alu_ii)
    b = ProgramBuilder(cfg)
    b.emit(Alu(AluOp.ADD, 0, 10, iter_out=3, use_imm=use_imm, imm=1), Gemm(0, 0), Finish())
    stats, _ = sim.run_image(b.build(), model="cycle")
    # ALU starts when it arrives (L + 2); a tensor operand is a second accumulator
    # read, so such micro-ops take two cycles; the empty GEMM takes 1 cycle.
    per_uop = alu_ii * (1 if use_imm else 2)
    assert stats.cycles == (LAT + 2) + (1 + 30 * per_uop + cfg.alu_pipeline) + 1 + 1
    assert stats.alu_uops == 30


@pytest.mark.parametrize("tiles", [1, 2, 5])
def test_double_buffered_pipeline_hides_load_and_store(tiles):
    """load -> compute -> store over `tiles` tiles, two buffer halves each.

    With the GEMM (G cycles) longer than a load (Ld) plus a store (St), the loads
    and stores of other tiles overlap it: cycles = T0 + Ld + tiles * G + St + 1,
    where T0 is when the fetch burst frees the memory port.
    """
    n_in, n_out, n_uop = 16, 16, 400

    def build(b):
        x = b.place_elems(MemId.INP, np.zeros((n_in, 1, 16), np.int8))
        u = b.place_uops([Uop(0, 0, 0)] * n_uop)
        out = b.reserve_elems(MemId.OUT, n_out * tiles, name="out")
        b.emit(Load(MemId.UOP, 0, u, 1, n_uop, n_uop))
        for k in range(tiles):
            half = k % 2
            b.emit(Load(MemId.INP, half * 1024, x, 1, n_in, n_in, pop_next=k >= 2, push_next=True))
            b.emit(Gemm(0, n_uop, pop_prev=True, pop_next=k >= 2, push_prev=True, push_next=True))
            b.emit(Store(MemId.OUT, half * 1024, out + k * n_out, 1, n_out, n_out, pop_prev=True,
                         push_prev=True))
        b.finish(load_pops=min(tiles, 2), compute_pops=min(tiles, 2))

    stats, img = _run(PYNQ, build)
    t0 = _fetch_hold(img.insn_count)
    uop_load = 1 + LAT + 1 + n_uop   # one micro-op per cycle into the buffer, +1 for the held beat
    ld = 1 + LAT + 2 * n_in
    last_out = img.regions["out"].addr + (tiles - 1) * n_out * 16
    st = 1 + _row(last_out, n_out * 16)
    g = 1 + n_uop + PYNQ.gemm_pipeline
    assert g > ld + 2 * st
    # The uop load (compute) and the first input load (load) both wait for the
    # fetch burst to free the port; the uop load asked first.
    first_gemm = t0 + uop_load + ld
    assert stats.cycles == first_gemm + tiles * g + st + 1
    assert stats.modules["compute"].busy >= tiles * g


def test_full_command_queue_stalls_fetch():
    """A long GEMM holds the compute queue full; the load behind it is dispatched late."""
    u = 200

    def program(cfg):
        b = ProgramBuilder(cfg)
        x = b.place_elems(MemId.INP, np.zeros((8, 1, 16), np.int8))
        b.emit(Gemm(0, u), Gemm(0, 1), Gemm(0, 1), Gemm(0, 1),
               Load(MemId.INP, 0, x, 1, 8, 8, push_next=True), Finish(pop_prev=True))
        return b.build()

    g0_end = (LAT + 2) + 1 + u + PYNQ.gemm_pipeline
    small = 1 + 1 + PYNQ.gemm_pipeline
    load = 1 + LAT + 16
    stats, _ = sim.run_image(program(PYNQ), model="cycle")
    assert stats.cycles == g0_end + 3 * small + 1          # the load finished long before
    assert stats.modules["fetch"].stall_queue == 0
    tight = PYNQ.replace(cmd_queue_depth=2)
    stats, _ = sim.run_image(program(tight), model="cycle")
    # GEMM 3 waits for compute to take GEMM 1 (at g0_end); the load is dispatched
    # one cycle later and FINISH waits for its token.
    assert stats.cycles == g0_end + 1 + load + 1
    assert stats.modules["fetch"].stall_queue > 0


def test_port_contention_first_come_first_served():
    """Two loads on different modules: the second waits for the port."""
    def build(b):
        x = b.place_elems(MemId.INP, np.zeros((64, 1, 16), np.int8))
        a = b.place_elems(MemId.ACC, np.zeros((16, 1, 16), np.int32))
        b.emit(Load(MemId.INP, 0, x, 1, 64, 64, push_next=True),
               Load(MemId.ACC, 0, a, 1, 16, 16),
               Finish(pop_prev=True))

    stats, _ = _run(PYNQ, build)
    t0 = _fetch_hold(3)
    inp, acc = 1 + LAT + 128, 1 + LAT + 128
    # both wait for the fetch burst; the load module wins the tie, the compute
    # module's ACC load follows, then FINISH (after the ACC load, with the token).
    assert stats.cycles == t0 + inp + acc + 1
    assert stats.modules["compute"].stall_memory == (t0 - (LAT + 4)) + inp
