"""Schedules as data (compiler/schedule.py): primitives -> LoopNest, JSON, every CompileError."""

import re

import pytest
from vtakit.compiler.backends.vta.loopnest import Loop, Part
from vtakit.compiler.backends.vta.schedule import Schedule, apply
from vtakit.compiler.backends.vta.te import conv2d_def, eltwise_def
from vtakit.isa.config import HwConfig

from vtakit.errors import CompileError

CFG = HwConfig.preset("pynq")   # batch 1, 16x16 blocks
ACC8 = CFG.replace(acc8_load=True)  # int8 operators need LOAD.ACC8, which pynq lacks


def conv():
    # 32 input channels -> 2 blocks, 64 output channels -> 4 blocks, 8x8 image, 3x3 "same":
    # axes n 1, oc 4, oh 8, ow 8, ic 2, kh 3, kw 3
    return conv2d_def(CFG, n=1, c_in=32, h=8, w=8, c_out=64, kh=3, kw=3, pad=1)


CACHES = Schedule().cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")


def full(s, *, data="root", weight="root", out="root", at="oh", intrinsic="gemm"):
    """`s` completed with caches, placements and tensorize."""
    return (Schedule(s.steps + CACHES.steps).dma_copy("data", data).dma_copy("weight", weight)
            .dma_copy("out", out).tensorize(at, intrinsic))


def fails(compute, schedule, message):
    with pytest.raises(CompileError, match=re.escape(message)):
        apply(compute, schedule)


def names(loops):
    return [(lp.name, lp.extent) for lp in loops]


# ------------------------------------------------------------------ primitives
def test_no_primitives_everything_inside():
    nest = apply(conv(), full(Schedule(), at="n"))
    assert nest.outer == []
    assert names(nest.inner) == [("n", 1), ("oc", 4), ("oh", 8), ("ow", 8), ("ic", 2), ("kh", 3), ("kw", 3)]
    assert nest.inner_axis == {a: a for a in ("n", "oc", "oh", "ow", "ic", "kh", "kw")}
    assert nest.parts == {} and nest.placement == {"data": 0, "weight": 0, "out": 0}
    assert nest.scopes == {"data": "inp", "weight": "wgt", "out": "acc"}
    assert nest.intrinsic == "gemm" and nest.vthread_level is None and nest.vthreads == 1


def test_split():
    # oh (8) split by 3: oh.o has ceil(8/3) = 3 iterations of stride 3, oh.i 3 of stride 1
    nest = apply(conv(), full(Schedule().split("oh", 3), at="oh.i"))
    assert names(nest.outer) == [("n", 1), ("oc", 4), ("oh.o", 3)]
    assert names(nest.inner) == [("oh.i", 3), ("ow", 8), ("ic", 2), ("kh", 3), ("kw", 3)]
    assert nest.parts == {"n": [Part("n", 1)], "oc": [Part("oc", 1)], "oh": [Part("oh.o", 3)]}
    assert nest.inner_axis["oh.i"] == "oh"


def test_split_twice_strides_multiply():
    # oh 8 -> oh.o (2, stride 4), oh.i 4; oh.i -> oh.i.o (2, stride 2), oh.i.i (2, stride 1)
    nest = apply(conv(), full(Schedule().split("oh", 4).split("oh.i", 2), at="oh.i.i"))
    assert names(nest.outer) == [("n", 1), ("oc", 4), ("oh.o", 2), ("oh.i.o", 2)]
    assert nest.parts["oh"] == [Part("oh.o", 4), Part("oh.i.o", 2)]
    assert names(nest.inner)[0] == ("oh.i.i", 2)


def test_tile():
    # tile(oh, ow, 4, 2) = split both, order oh.o ow.o oh.i ow.i
    nest = apply(conv(), full(Schedule().tile("oh", "ow", 4, 2), at="oh.i"))
    assert names(nest.outer) == [("n", 1), ("oc", 4), ("oh.o", 2), ("ow.o", 4)]
    assert names(nest.inner) == [("oh.i", 4), ("ow.i", 2), ("ic", 2), ("kh", 3), ("kw", 3)]
    assert nest.parts["oh"] == [Part("oh.o", 4)] and nest.parts["ow"] == [Part("ow.o", 2)]
    assert nest.inner_axis == {"oh.i": "oh", "ow.i": "ow", "ic": "ic", "kh": "kh", "kw": "kw"}


def test_reorder_and_placement_levels():
    s = (Schedule().split("oc", 2).split("ic", 1).tile("oh", "ow", 4, 4)
         .reorder("n", "oc.o", "oh.o", "ow.o", "ic.o", "oh.i", "ow.i", "oc.i", "ic.i", "kh", "kw"))
    nest = apply(conv(), full(s, weight="oc.o", out="ow.o", data="ic.o", at="oh.i"))
    assert names(nest.outer) == [("n", 1), ("oc.o", 2), ("oh.o", 2), ("ow.o", 2), ("ic.o", 2)]
    assert names(nest.inner) == [("oh.i", 4), ("ow.i", 4), ("oc.i", 2), ("ic.i", 1), ("kh", 3), ("kw", 3)]
    # level k = once per iteration of the k-th outer loop (1-based), 0 = root
    assert nest.placement == {"weight": 2, "out": 4, "data": 5}
    assert nest.compute_level == 5
    assert nest.parts == {"n": [Part("n", 1)], "oc": [Part("oc.o", 2)], "oh": [Part("oh.o", 4)],
                          "ow": [Part("ow.o", 4)], "ic": [Part("ic.o", 1)]}


def test_reorder_partial_list_keeps_other_positions():
    # listed loops occupy their sorted positions in the given order; others do not move
    nest = apply(conv(), full(Schedule().reorder("ow", "oc"), at="oh"))
    assert [lp.name for lp in nest.outer] == ["n", "ow"]
    assert [lp.name for lp in nest.inner] == ["oh", "oc", "ic", "kh", "kw"]


def test_fuse():
    s = (Schedule().tile("oh", "ow", 4, 4).cache_write("out", "acc").dma_copy("out", "ow.o")
         .fuse("oh.o", "ow.o"))
    s = (s.cache_read("data", "inp").cache_read("weight", "wgt").dma_copy("data", "oh.o+ow.o")
         .dma_copy("weight", "root").tensorize("oh.i", "gemm"))
    nest = apply(conv(), s)
    # the fused loop runs 2 * 2 = 4 times; it remembers its components and the inner extent
    assert names(nest.outer) == [("n", 1), ("oc", 4), ("oh.o+ow.o", 4)]
    assert nest.fused == {"oh.o+ow.o": ("oh.o", "ow.o", 2)}
    # parts still name the components, with their own strides
    assert nest.parts["oh"] == [Part("oh.o", 4)] and nest.parts["ow"] == [Part("ow.o", 4)]
    # a placement on a component (made before the fuse) sits at the fused loop's level (3)
    assert nest.placement == {"out": 3, "data": 3, "weight": 0}


def test_virtual_thread():
    # oc 4 -> split by 1 -> oc.o (4, stride 1); virtual_thread(oc.o, 2) splits it by ceil(4/2) = 2:
    # oc.o.v: 2 threads of stride 2, oc.o.t: 2 iterations of stride 1
    s = Schedule().split("oc", 1).reorder("n", "oc.o", "oh", "ow", "ic", "oc.i").virtual_thread("oc.o", 2)
    nest = apply(conv(), full(s, weight="oc.o.v", out="oc.o.t", data="oc.o.t", at="oh"))
    assert nest.outer == [Loop("n", 1), Loop("oc.o.v", 2, True), Loop("oc.o.t", 2)]
    assert nest.parts["oc"] == [Part("oc.o.v", 2), Part("oc.o.t", 1)]
    assert nest.vthread_level == 1 and nest.vthreads == 2
    assert nest.placement == {"weight": 2, "out": 3, "data": 3}
    # transfers below the thread loop (level > 1) get a copy per thread; all three are below
    assert all(nest.per_thread(t) for t in ("weight", "out", "data"))
    nest = apply(conv(), full(s, weight="n", out="oc.o.t", data="oc.o.t", at="oh"))
    assert not nest.per_thread("weight") and nest.per_thread("data")


def test_virtual_thread_uneven():
    # oh 8 split by 3: oh.o has 3 tiles; 2 threads -> factor ceil(3/2) = 2:
    # oh.o.v 2 threads (stride 3 * 2 = 6), oh.o.t 2 (stride 3); thread 1's second tile is outside
    s = Schedule().split("oh", 3).virtual_thread("oh.o", 2)
    nest = apply(conv(), full(s, out="oh.o.t", data="oh.o.t", weight="root", at="oh.i"))
    assert names(nest.outer) == [("n", 1), ("oc", 4), ("oh.o.v", 2), ("oh.o.t", 2)]
    assert nest.parts["oh"] == [Part("oh.o.v", 6), Part("oh.o.t", 3)]
    assert nest.vthread_level == 2


def test_even_split_of_inner_loop_is_fine():
    nest = apply(conv(), full(Schedule().split("oh", 4).split("oh.i", 2), at="oh.i.i"))
    assert ("oh.i.o", 2) in names(nest.outer)


# ------------------------------------------------------------------ JSON
def test_json_round_trip():
    s = full(Schedule().split("oc", 2).split("ic", 1).tile("oh", "ow", 4, 4)
             .reorder("n", "oc.o", "oh.o", "ow.o", "ic.o", "oh.i", "ow.i", "oc.i", "ic.i", "kh", "kw")
             .virtual_thread("oh.o", 2).fuse("n", "oc.o"),
             weight="ic.o", data="ic.o", out="ow.o", at="oh.i")
    text = s.to_json()
    assert text.startswith('[["split", "oc", 2], ["split", "ic", 1], ["tile", "oh", "ow", 4, 4]')
    back = Schedule.from_json(text)
    assert back == s
    assert back.to_json() == text
    assert apply(conv(), back) == apply(conv(), s)


def test_from_json_errors():
    with pytest.raises(CompileError, match=re.escape("unknown schedule step ['spilt', 'oh', 2]")):
        Schedule.from_json('[["spilt", "oh", 2]]')
    with pytest.raises(CompileError, match="unknown schedule step"):
        Schedule.from_json('[[]]')
    with pytest.raises(CompileError, match="schedule step split takes 2 arguments, got 1"):
        Schedule.from_json('[["split", "oh"]]')
    with pytest.raises(CompileError, match="schedule is not valid JSON"):
        Schedule.from_json('[["split", "oh", 2]')
    assert Schedule.from_json('[["reorder", "a", "b", "c"]]').steps == (("reorder", "a", "b", "c"),)


def test_unknown_primitive_in_apply():
    fails(conv(), Schedule((("spilt", "oh", 2),)), "unknown schedule primitive 'spilt'")


# ------------------------------------------------------------------ errors
def test_loop_does_not_exist():
    fails(conv(), Schedule().split("nope", 2),
          "op conv2d: schedule names loop 'nope', which does not exist here "
          "(loops: n, oc, oh, ow, ic, kh, kw)")
    # after a split the axis's own name is gone
    fails(conv(), Schedule().split("oh", 4).split("oh", 2), "schedule names loop 'oh'")
    fails(conv(), full(Schedule(), at="oh.i"), "schedule names loop 'oh.i'")
    fails(conv(), Schedule().reorder("oh", "zz"), "schedule names loop 'zz'")
    fails(conv(), Schedule().virtual_thread("zz", 2), "schedule names loop 'zz'")


def test_split_errors():
    fails(conv(), Schedule().split("oh", 4).split("oh.i", 3),
          "split of 'oh.i' (extent 4) by 3 would overlap tiles: only an axis's outermost loop may be "
          "split unevenly")
    fails(conv(), Schedule().split("oh", 0), "split factor 0 for 'oh' must be positive")
    fails(conv(), Schedule().fuse("oh", "ow").split("oh+ow", 2),
          "cannot split 'oh+ow': it is fused or a virtual thread")
    fails(conv(), Schedule().virtual_thread("oh", 2).split("oh.v", 2),
          "cannot split 'oh.v': it is fused or a virtual thread")


def test_fuse_errors():
    fails(conv(), Schedule().fuse("n", "oh"), "fuse needs adjacent loops, 'n' and 'oh' are not")
    fails(conv(), Schedule().fuse("oc", "n"), "fuse needs adjacent loops, 'oc' and 'n' are not")
    fails(conv(), Schedule().fuse("n", "oc").fuse("n+oc", "oh"), "cannot fuse a fused loop again")
    fails(conv(), Schedule().virtual_thread("oh", 2).fuse("oh.v", "oh.t"),
          "cannot fuse a virtual-thread loop")


def test_reorder_twice():
    fails(conv(), Schedule().reorder("oh", "oh"), "reorder lists a loop twice")


def test_virtual_thread_errors():
    fails(conv(), Schedule().virtual_thread("n", 2), "virtual_thread('n', 2): loop has extent 1")
    fails(conv(), Schedule().virtual_thread("oh", 0), "virtual_thread('oh', 0): loop has extent 8")
    s = Schedule().virtual_thread("oc", 2).virtual_thread("oh", 2)
    fails(conv(), full(s, out="oh.t", data="oh.t", weight="oh.t", at="ow"),
          "only one virtual-thread loop is supported")


def test_fused_or_vthread_loop_inside_tensorized_region():
    fails(conv(), full(Schedule().fuse("kh", "kw"), at="oh"),
          "loop 'kh+kw' is fused or a virtual thread: it must stay outside the tensorized loops")
    fails(conv(), full(Schedule().virtual_thread("oh", 2), at="oh.v"),
          "loop 'oh.v' is fused or a virtual thread: it must stay outside the tensorized loops")


def test_two_loops_of_one_axis_inside_tensorized_region():
    s = Schedule().split("oh", 4).reorder("oh.i", "oh.o")     # order ... oh.i, oh.o, ow ...
    fails(conv(), full(s, at="oh.i"), "axis 'oh' has two loops inside the tensorized region")
    # tensorizing at an outer part (stride 4) is refused first
    fails(conv(), full(Schedule().split("oh", 4), at="oh.o"),
          "loop 'oh.o' is not its axis's innermost part; tensorize inside it")


def test_cache_errors():
    fails(conv(), Schedule().cache_read("data", "wgt"),
          "'data' (INP elements) belongs in the inp scope, not 'wgt'")
    fails(conv(), Schedule().cache_write("out", "inp"),
          "'out' (OUT elements) belongs in the acc scope, not 'inp'")
    fails(conv(), Schedule().cache_write("data", "inp"), "cache_write does not apply to an input 'data'")
    fails(conv(), Schedule().cache_read("out", "acc"), "cache_read does not apply to the output 'out'")
    fails(conv(), Schedule().cache_read("bias", "acc"), "no tensor 'bias' (tensors: out, data, weight)")


def test_dma_copy_errors():
    fails(conv(), Schedule().dma_copy("data", "root"), "dma_copy of 'data' before its cache_read/cache_write")
    fails(conv(), full(Schedule(), data="kh", at="oh"), "dma_copy('data', 'kh') is inside the tensorized loops")
    fails(conv(), full(Schedule(), out="oh", at="oh"), "dma_copy('out', 'oh') is inside the tensorized loops")
    fails(conv(), Schedule(CACHES.steps).dma_copy("data", "zz"), "schedule names loop 'zz'")


def test_reduction_loop_outside_output_tile():
    # ic.o encloses the loop the output tile is placed at: partial sums would be stored
    s = Schedule().split("ic", 1).reorder("n", "ic.o", "oc", "oh", "ow", "ic.i")
    fails(conv(), full(s, out="oc", data="oc", weight="oc", at="oh"),
          "reduction loop 'ic.o' is outside the output tile: place dma_copy of the output at or above it")
    # the same loop fused with a spatial one still counts as a reduction
    s = Schedule().split("ic", 1).reorder("n", "oc", "ic.o", "oh", "ow", "ic.i").fuse("oc", "ic.o")
    fails(conv(), full(s, out="oc+ic.o", data="oc+ic.o", weight="root", at="oh"),
          "reduction loop 'oc+ic.o' is outside the output tile")
    # placing the output above it is fine
    nest = apply(conv(), full(Schedule().split("ic", 1).reorder("n", "oc", "ic.o", "oh", "ow", "ic.i"),
                              out="oc", data="ic.o", weight="ic.o", at="oh"))
    assert nest.placement == {"out": 2, "data": 3, "weight": 3}


def test_missing_tensorize_and_wrong_intrinsic():
    s = Schedule(CACHES.steps).dma_copy("data", "root").dma_copy("weight", "root").dma_copy("out", "root")
    fails(conv(), s, "the schedule never tensorizes (tensorize(loop, 'gemm'|'alu'))")
    fails(conv(), s.tensorize("oh", "alu"), "conv2d tensorizes with the 'gemm' intrinsic, not 'alu'")
    add = eltwise_def(ACC8, "add", n=1, c=16, h=2, w=2)
    fails(add, Schedule().tensorize("h", "gemm"), "add tensorizes with the 'alu' intrinsic, not 'gemm'")
    fails(conv(), Schedule().tensorize("zz", "gemm"), "schedule names loop 'zz'")


def test_missing_cache_or_placement():
    tz = Schedule().tensorize("oh", "gemm")
    # tensors are checked in the order out, data, weight
    s = (Schedule().cache_read("data", "inp").cache_write("out", "acc").dma_copy("data", "root")
         .dma_copy("out", "root"))
    fails(conv(), Schedule(s.steps + tz.steps), "tensor 'weight' has no cache_read")
    s = Schedule().cache_read("data", "inp").cache_read("weight", "wgt")
    fails(conv(), Schedule(s.steps + tz.steps), "tensor 'out' has no cache_write")
    s = Schedule(CACHES.steps).dma_copy("out", "root").dma_copy("data", "root").tensorize("oh", "gemm")
    fails(conv(), s, "tensor 'weight' has no dma_copy placement")


def test_init_tensor_placed_away_from_output():
    add = eltwise_def(ACC8, "add", n=1, c=32, h=4, w=4)      # axes n 1, c 2, h 4, w 4; init a, operand b
    base = (Schedule().split("h", 2).cache_write("out", "acc").cache_read("a", "acc").cache_read("b", "acc")
            .dma_copy("out", "h.o").dma_copy("b", "h.o"))
    fails(add, base.dma_copy("a", "c").tensorize("h.i", "alu"),
          "'a' initialises the output tile: dma_copy it at the output's loop")
    nest = apply(add, base.dma_copy("a", "h.o").tensorize("h.i", "alu"))
    assert nest.placement == {"out": 3, "a": 3, "b": 3} and nest.intrinsic == "alu"
