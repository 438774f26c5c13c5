"""On-chip buffer allocation (compiler/passes/capacity.py)."""

import re
from itertools import pairwise

import pytest
from vtakit.compiler.backends.vta.loopnest import walk
from vtakit.compiler.backends.vta.lowering.capacity import allocate
from vtakit.compiler.backends.vta.schedule import Schedule, apply
from vtakit.compiler.backends.vta.te import conv2d_def, eltwise_def, maxpool_def
from vtakit.compiler.backends.vta.templates import EltwiseKnobs, eltwise_schedule
from vtakit.isa.config import HwConfig

from vtakit.errors import CompileError

CFG = HwConfig.preset("pynq")     # inp 2048, wgt 1024, acc 2048 entries
ACC8 = CFG.replace(acc8_load=True)  # int8 operators need LOAD.ACC8, which pynq lacks


def alloc_of(compute, schedule, cfg=CFG):
    nest = apply(compute, schedule)
    return nest, allocate(nest, cfg, walk(nest))


def conv_threads():
    # 4x4 image, 3x3 "same", 2 ic and 2 oc blocks. Tiles of 2 output rows x 4 columns; 2 threads
    # over oh.o (2 tiles -> oh.o.v 2, oh.o.t 1). Weights at oc.o (above the thread loop),
    # output at ow.o and data at ic.o (below it).
    c = conv2d_def(CFG, n=1, c_in=32, h=4, w=4, c_out=32, kh=3, kw=3, pad=1)
    s = (Schedule().tile("oh", "ow", 2, 4).split("oc", 1).split("ic", 2)
         .reorder("n", "oc.o", "oh.o", "ow.o", "ic.o", "oh.i", "ow.i", "oc.i", "ic.i", "kh", "kw")
         .virtual_thread("oh.o", 2)
         .cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")
         .dma_copy("weight", "oc.o").dma_copy("out", "ow.o").dma_copy("data", "ic.o")
         .tensorize("oh.i", "gemm"))
    return alloc_of(c, s)


def test_per_thread_copies_only_below_thread_loop():
    nest, a = conv_threads()
    assert [lp.name for lp in nest.outer] == ["n", "oc.o", "oh.o.v", "oh.o.t", "ow.o", "ic.o"]
    assert nest.vthread_level == 2
    assert a.copies == {"data": 2, "out": 2, "weight": 1}
    # footprints: data rows -1..2 (or 1..4) x cols -1..4 x 2 ic blocks = 4 * 6 * 2 = 48;
    # weight 1 oc block x 2 ic x 3 x 3 = 18; out 2 x 4 = 8
    assert a.footprint == {"data": 48, "weight": 18, "out": 8}
    assert a.base == {("data", 0): 0, ("data", 1): 48, ("out", 0): 0, ("out", 1): 8, ("weight", 0): 0}
    assert a.used == {"inp": 96, "acc": 16, "wgt": 18}
    # slot(): per-thread tensors by thread, shared ones always copy 0
    assert a.slot("data", 1) == 48 and a.slot("weight", 1) == 0 and a.slot("out", 1) == 8


def test_without_threads_one_copy_each():
    c = conv2d_def(CFG, n=1, c_in=32, h=4, w=4, c_out=32, kh=3, kw=3, pad=1)
    s = (Schedule().tile("oh", "ow", 2, 4).split("ic", 1)
         .reorder("n", "oc", "oh.o", "ow.o", "ic.o", "oh.i", "ow.i", "ic.i", "kh", "kw")
         .cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")
         .dma_copy("weight", "ic.o").dma_copy("out", "ow.o").dma_copy("data", "ic.o")
         .tensorize("oh.i", "gemm"))
    _, a = alloc_of(c, s)
    assert a.copies == {"data": 1, "weight": 1, "out": 1}
    # data 4 rows x 6 cols x 1 ic block = 24; weight 1 x 1 x 3 x 3 = 9; out 2 x 4 = 8
    assert a.footprint == {"data": 24, "weight": 9, "out": 8}
    assert a.used == {"inp": 24, "wgt": 9, "acc": 8}


def test_slots_are_disjoint_per_scope():
    nest, a = conv_threads()
    spans = {}
    for (t, copy), base in a.base.items():
        spans.setdefault(nest.scopes[t], []).append((base, base + a.footprint[t]))
    for scope, ranges in spans.items():
        ranges.sort()
        for (_, end), (start, _) in pairwise(ranges):
            assert end <= start, scope
        assert ranges[-1][1] == a.used[scope]


def test_slot_is_largest_tile():
    # 6x6 image tiled by 4 rows: tiles of 4 and 2 rows; the slot fits the larger (4 x 6 = 24)
    c = eltwise_def(ACC8, "relu", n=1, c=16, h=6, w=6)
    _, a = alloc_of(c, eltwise_schedule(EltwiseKnobs(tile_c=1, tile_h=4, vthreads=1), inputs=("a",)), ACC8)
    assert a.footprint == {"out": 24}
    assert a.copies == {"out": 1, "a": 1} and a.base[("a", 0)] == a.base[("out", 0)]


def test_init_tensor_shares_output_slot():
    # add: out = a + b, a initialises the output tile. 4 rows x 4 cols, 2 channel blocks; tiles of
    # 1 channel block x 2 rows x 4 cols = 8 entries, 2 threads over the 2 row tiles.
    c = eltwise_def(ACC8, "add", n=1, c=32, h=4, w=4)
    nest, a = alloc_of(c, eltwise_schedule(EltwiseKnobs(tile_c=1, tile_h=2, vthreads=2), inputs=("a", "b")), ACC8)
    assert nest.vthread_level is not None
    # a is not transferred on its own (it arrives with the output tile): no footprint of its own
    assert a.footprint == {"b": 8, "out": 8}
    assert a.copies == {"b": 2, "out": 2, "a": 2}
    # sorted by name: b's copies first, then out's; a points at out's
    assert a.base == {("b", 0): 0, ("b", 1): 8, ("out", 0): 16, ("out", 1): 24,
                      ("a", 0): 16, ("a", 1): 24}
    assert a.used == {"acc": 32}
    assert a.slot("a", 1) == a.slot("out", 1) == 24


def test_overflow_names_scope_and_tensors():
    # 16 rows x 64 cols per tile = 1024 acc entries; b and out, 2 threads each: 4096 > 2048
    c = eltwise_def(ACC8, "add", n=1, c=16, h=32, w=64)
    s = eltwise_schedule(EltwiseKnobs(tile_c=1, tile_h=16, vthreads=2), inputs=("a", "b"))
    msg = (f"op add: acc buffer overflows: b 2 x 1024 + out 2 x 1024 = 4096 entries, it holds 2048 "
           f"(config {ACC8.label}); use smaller tiles or fewer virtual threads")
    with pytest.raises(CompileError, match=re.escape(msg)):
        alloc_of(c, s, ACC8)
    # one thread fits exactly: 1024 + 1024 = 2048
    _, a = alloc_of(c, eltwise_schedule(EltwiseKnobs(tile_c=1, tile_h=16, vthreads=1), inputs=("a", "b")), ACC8)
    assert a.used == {"acc": 2048}


def test_without_acc8_int8_tiles_are_staged_in_inp():
    # pynq has no LOAD.ACC8 (lowering/move.py): the init tensor a gets an INP staging slot the size of
    # the output tile; b, only added, lives in INP alone (the identity GEMM adds it into out); the
    # identity weight block takes one WGT entry
    c = eltwise_def(CFG, "add", n=1, c=32, h=4, w=4)
    _, a = alloc_of(c, eltwise_schedule(EltwiseKnobs(tile_c=1, tile_h=2, vthreads=2), inputs=("a", "b")))
    assert a.footprint == {"out": 8, "b": 8, "a@inp": 8, "identity": 1}
    assert a.copies == {"out": 2, "b": 2, "a@inp": 2, "identity": 1, "a": 2}
    assert a.used == {"acc": 16, "inp": 32, "wgt": 1}
    assert a.base[("a", 1)] == a.base[("out", 1)]
    # max pooling: the data tile (with its halo) is staged in INP and moved into its acc slot
    p = maxpool_def(CFG, n=1, c=16, h=4, w=4, kernel=2, stride=2)
    _, a = alloc_of(p, eltwise_schedule(EltwiseKnobs(tile_c=1, tile_h=2, vthreads=1), inputs=("data",), pool=True))
    assert a.footprint == {"out": 4, "data": 16, "data@inp": 16, "identity": 1}
    assert a.used == {"acc": 20, "inp": 16, "wgt": 1}


def test_overflow_in_input_scope():
    # a whole 64x64 image with 2 ic blocks in one data tile: 64 * 64 * 2 = 8192 > 2048 inp entries
    c = conv2d_def(CFG, n=1, c_in=32, h=64, w=64, c_out=16, kh=1, kw=1)
    s = (Schedule().tile("oh", "ow", 2, 64)
         .cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")
         .dma_copy("data", "root").dma_copy("weight", "root").dma_copy("out", "ow.o")
         .tensorize("oh.i", "gemm"))
    with pytest.raises(CompileError, match=re.escape("inp buffer overflows: data 1 x 8192 = 8192 entries, "
                                                     "it holds 2048")):
        alloc_of(c, s)
