"""The plan cache: instruction shapes that repeat reuse their index plan, never someone else's.

A plan (sim/plans.py) is keyed by the micro-op range's contents and the loop fields, so a
hit must give exactly what planning afresh gives (checked against a machine that caches
nothing and against an independent numpy loop), and an instruction whose micro-ops or
loop differ in one entry must get its own plan.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.isa import Finish, Gemm, HwConfig, Load, MemId, Uop
from vtakit.isa.image import ProgramBuilder
from vtakit.sim import Machine, execute, plans
from vtakit.sim.random_programs import random_program
from vtakit.sim.workloads import ConvTile, conv_tiles_program

from tests.support.reference import reference_image


def _run(img, model: str = "cycle"):
    dram = img.dram.copy()
    machine = Machine(img.config, dram)
    stats = execute(machine, img.insn_addr, img.insn_count, model=model)
    return machine, stats, dram


def _uncached(img, monkeypatch, model: str = "cycle"):
    with monkeypatch.context() as m:
        m.setattr(plans, "_CACHE_ENTRIES", 0)
        machine, stats, dram = _run(img, model)
    assert machine.plans.hits == 0 and len(machine.plans._plans) == 0
    return stats, dram


@pytest.mark.parametrize("preset", ["pynq", "1x8", "2x16"])
def test_repeated_tiles_hit_and_match_the_uncached_run(preset, monkeypatch):
    cfg = HwConfig.preset(preset)
    img = conv_tiles_program(cfg, ConvTile(rows=3, cols=4, cin_blocks=2, cout_blocks=2, kernel=3), tiles=6)
    machine, stats, dram = _run(img)
    assert machine.plans.hits > machine.plans.misses > 0
    plain_stats, plain_dram = _uncached(img, monkeypatch)
    assert np.array_equal(dram, plain_dram)
    assert np.array_equal(dram, reference_image(img))
    assert (stats.cycles, stats.bytes_read, stats.bytes_written, stats.gemm_uops, stats.alu_uops) == \
        (plain_stats.cycles, plain_stats.bytes_read, plain_stats.bytes_written, plain_stats.gemm_uops,
         plain_stats.alu_uops)


@pytest.mark.parametrize("preset,seed", [(p, s) for p in ("pynq", "1x8", "2x16") for s in range(4)])
def test_random_programs_same_with_and_without_the_cache(preset, seed, monkeypatch):
    """Random programs reload micro-ops, repeat shapes and carry ALU hazards."""
    img = random_program(HwConfig.preset(preset), 500 + seed)
    _, stats, dram = _run(img)
    plain_stats, plain_dram = _uncached(img, monkeypatch)
    assert np.array_equal(dram, plain_dram)
    assert np.array_equal(dram, reference_image(img))
    assert stats.cycles == plain_stats.cycles


def _gemm_machine(cfg, uop_sets, gemms, inp, wgt, acc):
    """A machine after running, per step, a LOAD.UOP of `uop_sets[i]` at entry 0 and `gemms[i]`."""
    b = ProgramBuilder(cfg)
    i_addr = b.place_elems(MemId.INP, inp)
    w_addr = b.place_elems(MemId.WGT, wgt)
    a_addr = b.place_elems(MemId.ACC, acc)
    insns = [Load(MemId.INP, 0, i_addr, 1, len(inp), len(inp)), Load(MemId.WGT, 0, w_addr, 1, len(wgt), len(wgt)),
             Load(MemId.ACC, 0, a_addr, 1, len(acc), len(acc))]
    for uops, gemm in zip(uop_sets, gemms):
        insns += [Load(MemId.UOP, 0, b.place_uops(uops), 1, len(uops), len(uops)), gemm]
    b.emit(*insns, Finish())
    img = b.build()
    machine, _, _ = _run(img, model="functional")
    return machine


def _sequential(acc, inp, wgt, steps):
    """acc after each step's micro-op loop, in int64 then wrapped to int32 (the ISA's loop order)."""
    out = acc.astype(np.int64)
    for uops, g in steps:
        for o in range(g.iter_out):
            for i in range(g.iter_in):
                for u in uops:
                    d = u.dst + o * g.dst_factor_out + i * g.dst_factor_in
                    s = u.src + o * g.src_factor_out + i * g.src_factor_in
                    w = u.wgt + o * g.wgt_factor_out + i * g.wgt_factor_in
                    out[d] += inp[s].astype(np.int64) @ wgt[w].astype(np.int64).T
    return ((out + 2**31) % 2**32 - 2**31).astype(np.int32)


def _conv_uops(taps: int, pixels: int, groups: int, shift: int = 0):
    return [Uop(dst=g * pixels + p, src=(p + t + shift) % 32, wgt=g * taps + t)
            for g in range(groups) for p in range(pixels) for t in range(taps)]


def test_a_hit_at_int8_extremes_wraps_like_the_loop():
    """Every product is (-128)(-128) and the accumulator starts near 2**31: the second GEMM
    (a cache hit) must wrap exactly as the first did and as the sequential loop does."""
    cfg = HwConfig.preset("pynq")
    inp = np.full((32, cfg.batch, cfg.block_in), -128, np.int8)
    wgt = np.full((64, cfg.block_out, cfg.block_in), -128, np.int8)
    acc = np.full((64, cfg.batch, cfg.block_out), 2**31 - 2**20, np.int64).astype(np.int32)
    uops = _conv_uops(taps=9, pixels=8, groups=2)
    gemm = Gemm(0, len(uops), iter_out=2, iter_in=1, dst_factor_out=16, src_factor_out=1)
    machine = _gemm_machine(cfg, [uops, uops], [gemm, gemm], inp, wgt, acc)
    assert (machine.plans.hits, machine.plans.misses) == (1, 1)
    (plan,) = machine.plans._plans.values()
    assert plan.chunks[0].blocks is not None  # the matrix-product path, groups sharing one product
    expected = _sequential(acc, inp, wgt, [(uops, gemm), (uops, gemm)])
    assert np.array_equal(machine.acc[:64], expected)
    assert (expected[:32] < 0).any()  # it did wrap


@pytest.mark.parametrize("change", ["uop-contents", "loop-factor", "iterations"])
def test_an_instruction_that_differs_gets_its_own_plan(change):
    """Same range, same fields but reloaded micro-ops (or the same micro-ops with another loop):
    a miss each time, and the results of the loop each one asks for."""
    cfg = HwConfig.preset("pynq")
    rng = np.random.default_rng(7)
    inp = rng.integers(-128, 128, (32, 1, 16), dtype=np.int8)
    wgt = rng.integers(-128, 128, (64, 16, 16), dtype=np.int8)
    acc = rng.integers(-2**20, 2**20, (64, 1, 16), dtype=np.int32)
    first = _conv_uops(taps=4, pixels=16, groups=2)
    gemm = Gemm(0, len(first), iter_out=2, dst_factor_out=32, src_factor_out=2, wgt_factor_out=0)
    second, gemm2 = first, gemm
    if change == "uop-contents":
        second = _conv_uops(taps=4, pixels=16, groups=2, shift=1)
    elif change == "loop-factor":
        gemm2 = Gemm(0, len(first), iter_out=2, dst_factor_out=32, src_factor_out=3)
    else:
        gemm2 = Gemm(0, len(first), iter_out=1, dst_factor_out=32, src_factor_out=2)
    machine = _gemm_machine(cfg, [first, second, first], [gemm, gemm2, gemm], inp, wgt, acc)
    assert (machine.plans.misses, machine.plans.hits) == (2, 1)
    expected = _sequential(acc, inp, wgt, [(first, gemm), (second, gemm2), (first, gemm)])
    assert np.array_equal(machine.acc[:64], expected)


def test_huge_loops_are_not_kept():
    cache = plans.PlanCache()
    d0 = np.arange(64, dtype=np.int64)
    plan = cache.get(("huge",), lambda: plans.gemm_plan(d0, d0, d0, 4096, 8, 0, 0, 0, 0, 0, 0, False, True))
    assert not plan.cacheable and len(cache._plans) == 0
    small = cache.get(("small",), lambda: plans.gemm_plan(d0, d0, d0, 2, 2, 64, 0, 0, 0, 0, 0, False, True))
    assert small.cacheable and cache.get(("small",), lambda: None) is small


def test_decoded_programs_are_remembered_by_their_bytes():
    """A network's programs are decoded once; changed bytes or a bad program are never served stale."""
    from vtakit.errors import SimError
    from vtakit.isa.fields import INSN_BYTES
    from vtakit.sim.decoded import decode_cached

    img = random_program(HwConfig.preset("pynq"), 3)
    dram = img.dram.copy()
    first = decode_cached(img.config, dram, img.insn_addr, img.insn_count)
    assert decode_cached(img.config, dram.copy(), img.insn_addr, img.insn_count) is first
    assert decode_cached(HwConfig.preset("1x8"), dram, img.insn_addr, img.insn_count) is not first
    last = img.insn_addr + (img.insn_count - 1) * INSN_BYTES  # the FINISH becomes an unknown opcode
    dram[last] |= 0x7
    for _ in range(2):
        with pytest.raises(SimError, match="unknown opcode"):
            decode_cached(img.config, dram, img.insn_addr, img.insn_count)
