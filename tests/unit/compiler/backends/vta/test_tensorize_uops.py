"""Tensorize (compiler/passes/tensorize.py) and micro-op folding (compiler/passes/uops.py)."""

import random
import re
from dataclasses import replace
from itertools import product

import numpy as np
import pytest
from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.lowering.tensorize import IntrinsicCall, compute_call, match, tile_calls, tile_op
from vtakit.compiler.backends.vta.lowering.uops import MAX_ITER, UopCache, fold, merge_loops
from vtakit.compiler.backends.vta.regions import region_of
from vtakit.compiler.backends.vta.schedule import Schedule, apply
from vtakit.compiler.backends.vta.te import Access, Axis, ComputeDef, Tensor, conv2d_def, eltwise_def, maxpool_def
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp, MemId

from vtakit.errors import CompileError

CFG = HwConfig.preset("pynq")
ACC8 = CFG.replace(acc8_load=True)  # int8 operators need LOAD.ACC8, which pynq lacks
v = Affine.var
BASES = {"data": 100, "weight": 200, "out": 300, "bias": 400}


def norm(e):
    return dict(e.terms), e.const


def conv_nest(h, **kw):
    """3x3 "same" convolution, 2 ic / 2 oc blocks, tiles of 2x2 outputs x 1 oc block x both ic blocks."""
    c = conv2d_def(CFG, n=1, c_in=32, h=h, w=h, c_out=32, kh=3, kw=3, pad=1, **kw)
    s = (Schedule().tile("oh", "ow", 2, 2).split("oc", 1).split("ic", 2)
         .reorder("n", "oc.o", "oh.o", "ow.o", "ic.o", "oh.i", "ow.i", "oc.i", "ic.i", "kh", "kw")
         .cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")
         .dma_copy("data", "ic.o").dma_copy("weight", "ic.o").dma_copy("out", "ow.o"))
    if kw.get("bias"):
        s = s.cache_read("bias", "acc").dma_copy("bias", "ow.o")
    return apply(c, s.tensorize("oh.i", "gemm"))


def call_for(nest, env):
    box = nest.box(env, nest.compute_level)
    regions = {a.tensor.name: region_of(a, box) for a in (nest.compute.data, nest.compute.weight,
                                                           nest.compute.out)}
    return compute_call(nest, box, regions, BASES), regions


# ------------------------------------------------------------------ compute_call
def test_compute_call_full_tile_by_hand():
    nest = conv_nest(4)
    call, regions = call_for(nest, {"n": 0, "oc.o": 0, "oh.o": 0, "ow.o": 0, "ic.o": 0})
    # data tile: rows -1..2, cols -1..2, 2 ic blocks -> count (1, 2, 4, 4), strides (32, 16, 4, 1)
    assert regions["data"].lo == (0, 0, -1, -1) and regions["data"].strides == (32, 16, 4, 1)
    assert call.kind == "gemm"
    assert call.loops == (("oh.i", 2), ("ow.i", 2), ("oc.i", 1), ("ic.i", 2), ("kh", 3), ("kw", 3))
    # out tile (1, 1, 2, 2): dst = 2 oh.i + ow.i + 300
    assert norm(call.dst) == ({"oh.i": 2, "ow.i": 1}, 300)
    # data[0, ic.i, oh.i + kh - 1, ow.i + kw - 1] - lo = (0, ic.i, oh.i + kh, ow.i + kw):
    # src = 16 ic.i + 4 (oh.i + kh) + ow.i + kw + 100
    assert norm(call.src) == ({"ic.i": 16, "oh.i": 4, "kh": 4, "ow.i": 1, "kw": 1}, 100)
    # weight tile (1, 2, 3, 3): wgt = 9 ic.i + 3 kh + kw + 200
    assert norm(call.wgt) == ({"ic.i": 9, "kh": 3, "kw": 1}, 200)
    assert call.op is None and call.imm is None


def test_compute_call_edge_tile_by_hand():
    # 3x3 image: the tile at oh.o = 1 has one row (oh 2), ow.o = 0 two columns
    nest = conv_nest(3)
    call, regions = call_for(nest, {"n": 0, "oc.o": 1, "oh.o": 1, "ow.o": 0, "ic.o": 0})
    # data rows 1..3 (3 is padding), cols -1..2: count (1, 2, 3, 4), strides (24, 12, 4, 1)
    assert regions["data"].lo == (0, 0, 1, -1) and regions["data"].count == (1, 2, 3, 4)
    assert call.loops == (("oh.i", 1), ("ow.i", 2), ("oc.i", 1), ("ic.i", 2), ("kh", 3), ("kw", 3))
    # the one-row axis is fixed: dst = ow.i + 300 (out tile (1, 1, 1, 2))
    assert norm(call.dst) == ({"ow.i": 1}, 300)
    # data[0, ic.i, 2 + kh - 1, ow.i + kw - 1] - (0, 0, 1, -1) = (0, ic.i, kh, ow.i + kw)
    assert norm(call.src) == ({"ic.i": 12, "kh": 4, "ow.i": 1, "kw": 1}, 100)
    assert norm(call.wgt) == ({"ic.i": 9, "kh": 3, "kw": 1}, 200)


def test_compute_call_maxpool_is_alu_max():
    c = maxpool_def(ACC8, n=1, c=16, h=4, w=4, kernel=2, stride=2)      # 2x2 outputs
    s = (Schedule().cache_write("out", "acc").cache_read("data", "acc")
         .dma_copy("out", "root").dma_copy("data", "root").tensorize("oh", "alu"))
    nest = apply(c, s)
    box = nest.box({}, 0)
    regions = {"data": region_of(c.data, box), "out": region_of(c.out, box)}
    call = compute_call(nest, box, regions, {"data": 0, "out": 50})
    assert call.kind == "alu" and call.op == AluOp.MAX and call.wgt is None
    # out (1, 1, 2, 2): 2 oh + ow + 50; data (1, 1, 4, 4): 4 (2 oh + kh) + 2 ow + kw
    assert norm(call.dst) == ({"oh": 2, "ow": 1}, 50)
    assert norm(call.src) == ({"oh": 8, "kh": 4, "ow": 2, "kw": 1}, 0)


def test_compute_call_eltwise_has_no_reduction():
    c = eltwise_def(ACC8, "relu", n=1, c=16, h=2, w=2)
    s = (Schedule().cache_write("out", "acc").cache_read("a", "acc").dma_copy("out", "root")
         .dma_copy("a", "root").tensorize("n", "alu"))
    nest = apply(c, s)
    box = nest.box({}, 0)
    with pytest.raises(CompileError, match="relu has no reduction to compute"):
        compute_call(nest, box, {"out": region_of(c.out, box)}, {"out": 0})


# ------------------------------------------------------------------ tile calls
def test_tile_calls_begin_and_end():
    nest = conv_nest(4, bias=True, shift=4, clip=(-128, 127))
    # an output tile with both oc blocks: use the output's box at level 3 (oc.o free)
    box = nest.box({"n": 0, "oc.o": 0, "oh.o": 1, "ow.o": 0}, 4)
    box = dict(box, oc=(0, 2))
    c = nest.compute
    regions = {"out": region_of(c.out, box), "bias": region_of(c.steps[0].operand, box)}
    assert regions["out"].count == (1, 2, 2, 2) and regions["out"].strides == (8, 4, 2, 1)
    loops = (("t0", 1), ("t1", 2), ("t2", 2), ("t3", 2))
    dst = ({"t0": 8, "t1": 4, "t2": 2, "t3": 1}, 300)
    (reset,) = tile_calls(nest, box, regions, BASES, "begin")
    assert reset.kind == "reset" and reset.loops == loops and norm(reset.dst) == dst
    add, shr, mn, mx = tile_calls(nest, box, regions, BASES, "end")
    # bias[oc] with oc = t1 (both blocks): src = t1 + 400, broadcast over rows and columns
    assert (add.kind, add.op, add.imm, norm(add.src)) == ("alu", AluOp.ADD, None, ({"t1": 1}, 400))
    assert (shr.op, shr.imm, shr.src) == (AluOp.SHR, 4, None)
    assert (mn.op, mn.imm, mx.op, mx.imm) == (AluOp.MIN, 127, AluOp.MAX, -128)
    assert all(x.loops == loops and norm(x.dst) == dst for x in (add, shr, mn, mx))
    shift = tile_op(nest, regions, BASES, AluOp.SHR, 8)
    assert (shift.kind, shift.op, shift.imm, shift.loops) == ("alu", AluOp.SHR, 8, loops)
    # folding the bias add: t0 (extent 1) drops, t2 merges into t3 (dst 2 = 1 * 2, src 0 = 0 * 2),
    # t1 does not (src 1 != 0): iter 2 x 4, factors dst (4, 1), src (1, 0), one micro-op
    f = fold(add)
    assert (f.iter_out, f.iter_in) == (2, 4)
    assert f.factors == {"dst": (4, 1), "src": (1, 0)}
    assert f.kernel.tolist() == [[300, 400, 0]]


def test_tile_calls_begin_for_max_pool_sets_minus_infinity():
    c = maxpool_def(ACC8, n=1, c=16, h=4, w=4, kernel=2, stride=2)
    s = (Schedule().cache_write("out", "acc").cache_read("data", "acc")
         .dma_copy("out", "root").dma_copy("data", "root").tensorize("oh", "alu"))
    nest = apply(c, s)
    box = nest.box({}, 0)
    reset, low = tile_calls(nest, box, {"out": region_of(c.out, box)}, {"out": 7}, "begin")
    assert reset.kind == "reset"
    assert (low.kind, low.op, low.imm) == ("alu", AluOp.MIN, -(1 << 15))
    assert norm(low.dst) == ({"t0": 4, "t1": 4, "t2": 2, "t3": 1}, 7)


# ------------------------------------------------------------------ match
def test_match_accepts_scheduled_ops():
    match(conv_nest(4))


def test_match_errors():
    nest = conv_nest(4)
    with pytest.raises(CompileError, match="the output must be computed in the acc scope"):
        match(replace(nest, scopes={**nest.scopes, "out": "inp"}))
    with pytest.raises(CompileError, match=re.escape("GEMM reads its data from the inp scope; 'data' is "
                                                     "cached in 'wgt'")):
        match(replace(nest, scopes={**nest.scopes, "data": "wgt"}))
    with pytest.raises(CompileError, match=re.escape("GEMM reads its weight from the wgt scope; 'weight' "
                                                     "is cached in None")):
        match(replace(nest, scopes={k: s for k, s in nest.scopes.items() if k != "weight"}))
    nest = conv_nest(4, bias=True)
    with pytest.raises(CompileError, match="ALU operand 'bias' must be cached in acc"):
        match(replace(nest, scopes={**nest.scopes, "bias": "inp"}))
    c = maxpool_def(ACC8, n=1, c=16, h=4, w=4, kernel=2, stride=2)
    pool = apply(c, Schedule().cache_write("out", "acc").cache_read("data", "acc").dma_copy("out", "root")
                 .dma_copy("data", "root").tensorize("oh", "alu"))
    match(pool)
    with pytest.raises(CompileError, match="the ALU reads its operands from the acc scope"):
        match(replace(pool, scopes={**pool.scopes, "data": "inp"}))


def test_match_output_index_must_be_plain_axes():
    # out[2 * h] = a[h]: an output dimension that is not one axis with coefficient 1
    c = ComputeDef("odd", (Axis("h", 4),), Access(Tensor("out", (8,), MemId.OUT), (v("h", 2),)),
                   init=Access(Tensor("a", (4,), MemId.ACC), (v("h"),)))
    s = (Schedule().cache_write("out", "acc").cache_read("a", "acc").dma_copy("out", "root")
         .dma_copy("a", "root").tensorize("h", "alu"))
    with pytest.raises(CompileError, match="each output dimension must be indexed by one axis"):
        match(apply(c, s))
    c = replace(c, out=Access(Tensor("out", (8,), MemId.OUT), (v("h") + 1,)))
    with pytest.raises(CompileError, match="each output dimension must be indexed by one axis"):
        match(apply(c, s))


# ------------------------------------------------------------------ merge_loops / fold
def test_merge_loops_merges_uniform_walks():
    # a (3) outside b (4): dst 4a + b and src 8a + 2b advance as one loop of 12
    maps = {"dst": v("a", 4) + v("b") + 1, "src": v("a", 8) + v("b", 2)}
    assert merge_loops([("a", 3), ("b", 4)], maps) == [("b", 12)]
    assert norm(maps["dst"]) == ({"b": 1}, 1) and norm(maps["src"]) == ({"b": 2}, 0)


def test_merge_loops_keeps_others():
    # dst 5a + b: 5 != 1 * 4, a gap between rows: no merge
    maps = {"dst": v("a", 5) + v("b")}
    assert merge_loops([("a", 3), ("b", 4)], maps) == [("a", 3), ("b", 4)]
    assert norm(maps["dst"]) == ({"a": 5, "b": 1}, 0)
    # one map fine, the other not (src 0 != 1 * 4): no merge
    maps = {"dst": v("a", 4) + v("b"), "src": v("b")}
    assert merge_loops([("a", 3), ("b", 4)], maps) == [("a", 3), ("b", 4)]


def test_merge_loops_chains_and_drops_unit_loops():
    # c (2) > a (3) > u (1) > b (4), dst = 12c + 4a + b: u is dropped, then a into b, then c into b
    maps = {"dst": v("c", 12) + v("a", 4) + v("b") + v("u", 99)}
    assert merge_loops([("c", 2), ("a", 3), ("u", 1), ("b", 4)], maps) == [("b", 24)]
    # a middle loop that breaks the chain: c (2), a (3), b (4) with dst 100c + 4a + b -> [c, b 12]
    maps = {"dst": v("c", 100) + v("a", 4) + v("b")}
    assert merge_loops([("c", 2), ("a", 3), ("b", 4)], maps) == [("c", 2), ("b", 12)]
    # only unit loops: the first is kept
    assert merge_loops([("x", 1), ("y", 1)], {"dst": v("x")}) == [("x", 1)]


def test_fold_conv_tile_by_hand():
    nest = conv_nest(4)
    call, _ = call_for(nest, {"n": 0, "oc.o": 0, "oh.o": 0, "ow.o": 0, "ic.o": 0})
    f = fold(call)
    # no loops merge (kh: src 4 != 1 * 3; ic.i: src 16 != 4 * 3; ow.i: dst 1 != 0; oh.i: src 4 != 1 * 2);
    # oh.i, ow.i fold into iter_out / iter_in, ic.i, kh, kw (2 * 3 * 3 = 18) are micro-ops
    assert (f.iter_out, f.iter_in) == (2, 2)
    assert f.factors == {"dst": (2, 1), "src": (4, 1), "wgt": (0, 0)}
    expected = [[300, 100 + 16 * ic + 4 * kh + kw, 200 + 9 * ic + 3 * kh + kw]
                for ic in range(2) for kh in range(3) for kw in range(3)]
    assert f.kernel.tolist() == expected
    assert f.kernel[:4].tolist() == [[300, 100, 200], [300, 101, 201], [300, 102, 202], [300, 104, 203]]
    assert f.kernel.dtype == np.int64 and f.kernel.shape == (18, 3)


def test_fold_edge_tile_merges_ic_into_kh():
    nest = conv_nest(3)
    call, _ = call_for(nest, {"n": 0, "oc.o": 1, "oh.o": 1, "ow.o": 0, "ic.o": 0})
    f = fold(call)
    # src 12 ic.i + 4 kh + ow.i + kw, wgt 9 ic.i + 3 kh + kw: ic.i (2) advances like kh (3) by
    # 12 = 4 * 3 and 9 = 3 * 3, so they merge into one loop of 6; oh.i (1) and oc.i (1) drop.
    # Loops ow.i (2), kh (6), kw (3): iter 2 x 6, kernel over kw.
    assert (f.iter_out, f.iter_in) == (2, 6)
    assert f.factors == {"dst": (1, 0), "src": (1, 4), "wgt": (0, 3)}
    assert f.kernel.tolist() == [[300, 100, 200], [300, 101, 201], [300, 102, 202]]


def test_fold_without_loops():
    f = fold(IntrinsicCall("alu", (), Affine.of(5), src=Affine.of(7), op=AluOp.ADD))
    assert (f.iter_out, f.iter_in) == (1, 1)
    assert f.factors == {"dst": (0, 0), "src": (0, 0)}
    assert f.kernel.tolist() == [[5, 7, 0]]


def test_fold_one_loop():
    f = fold(IntrinsicCall("reset", (("t", 5),), v("t", 2) + 3))
    assert (f.iter_out, f.iter_in) == (5, 1)
    assert f.factors == {"dst": (2, 0)}
    assert f.kernel.tolist() == [[3, 0, 0]]


def test_fold_iteration_limit():
    assert MAX_ITER == (1 << 14) - 1
    f = fold(IntrinsicCall("reset", (("t", MAX_ITER),), v("t")))
    assert f.iter_out == MAX_ITER
    with pytest.raises(CompileError, match=re.escape(f"loop 't' of {MAX_ITER + 1} iterations exceeds the "
                                                     f"{MAX_ITER} an instruction can run")):
        fold(IntrinsicCall("reset", (("t", MAX_ITER + 1),), v("t")))


def _triples(call):
    names = [n for n, _ in call.loops]
    maps = [m for m in (call.dst, call.src, call.wgt)]
    out = []
    for pt in product(*(range(e) for _, e in call.loops)):
        env = dict(zip(names, pt))
        out.append(tuple(m.eval(env) if m is not None else 0 for m in maps))
    return sorted(out)


def _folded_triples(f):
    out = []
    fo = {k: f.factors.get(k, (0, 0)) for k in ("dst", "src", "wgt")}
    for o in range(f.iter_out):
        for i in range(f.iter_in):
            for row in f.kernel.tolist():
                out.append(tuple(row[c] + fo[k][0] * o + fo[k][1] * i
                                 for c, k in enumerate(("dst", "src", "wgt"))))
    return sorted(out)


def test_fold_preserves_the_iteration_space_random():
    rng = random.Random(1234)
    for _ in range(200):
        n = rng.randint(0, 4)
        loops = tuple((f"l{k}", rng.choice([1, 1, 2, 3, 4])) for k in range(n))

        def rand_map(loops=loops):
            m = Affine.of(rng.randint(0, 50))
            for name, _ in loops:
                # sometimes make the walk contiguous with the next loop, to exercise merging
                m = m + v(name, rng.choice([0, 1, 2, 3, 4, 6, 8, 12]))
            return m
        call = IntrinsicCall("gemm", loops, rand_map(), src=rand_map(), wgt=rand_map())
        assert _folded_triples(fold(call)) == _triples(call), call


# ------------------------------------------------------------------ UopCache
def k(*rows):
    return np.array([[r, 0, 0] for r in rows], dtype=np.int64)


def test_uop_cache_dedup():
    cache = UopCache(10)
    assert cache.place(k(1, 2, 3)) == (0, 0)          # loaded at 0 from DRAM element 0
    assert cache.place(k(4, 5)) == (3, 3)
    assert cache.place(k(1, 2, 3)) == (0, None)       # resident: no reload
    assert cache.place(k(4, 5)) == (3, None)
    assert cache.loads == 2
    assert cache.dram_table()[:, 0].tolist() == [1, 2, 3, 4, 5]


def test_uop_cache_eviction():
    cache = UopCache(8)
    a, b, c = k(1, 2, 3, 4), k(5, 6, 7), k(8, 9)
    assert cache.place(a) == (0, 0)
    assert cache.place(b) == (4, 4)
    # 7 used + 2 > 8: everything is evicted, c goes to 0, new in DRAM at 7
    assert cache.place(c) == (0, 7)
    # a was evicted: reloaded (on-chip 2), but from its existing DRAM copy at 0
    assert cache.place(a) == (2, 0)
    assert cache.place(c) == (0, None)
    assert cache.place(b) == (0, 4)                   # 6 + 3 > 8: evicted again, DRAM copy 4 reused
    assert cache.loads == 5
    table = cache.dram_table()
    assert table.shape == (9, 3) and table[:, 0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_uop_cache_says_when_it_evicted():
    """Evicted once, a kernel can sit on chip away from its DRAM offset even if each kernel loaded only
    once (here b: on chip at 0, in DRAM at 4), so the table can no longer be loaded whole at the start."""
    cache = UopCache(6)
    assert cache.place(k(1, 2, 3, 4)) == (0, 0) and not cache.evicted
    assert cache.place(k(1, 2, 3, 4)) == (0, None) and not cache.evicted
    assert cache.place(k(5, 6, 7)) == (0, 4) and cache.evicted
    assert cache.loads == 2 and len(cache.words) == 2


def test_uop_cache_exact_fit_and_too_large():
    cache = UopCache(4)
    assert cache.place(k(1, 2)) == (0, 0)
    assert cache.place(k(3, 4)) == (2, 2)             # 2 + 2 == 4: fits without eviction
    assert cache.place(k(1, 2)) == (0, None)
    with pytest.raises(CompileError, match="a micro-op kernel of 5 entries does not fit the 4-entry "
                                           "micro-op buffer"):
        cache.place(k(1, 2, 3, 4, 5))
    assert UopCache(4).dram_table().shape == (0, 3)


def test_uop_cache_keys_on_all_columns():
    cache = UopCache(16)
    a = np.array([[1, 2, 3]], dtype=np.int64)
    b = np.array([[1, 2, 4]], dtype=np.int64)
    assert cache.place(a) == (0, 0)
    assert cache.place(b) == (1, 1)
