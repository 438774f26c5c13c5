"""The loop-nest IR (compiler/loopnest.py): tile boxes and the statement walk."""

from vtakit.compiler.backends.vta.loopnest import walk
from vtakit.compiler.backends.vta.schedule import Schedule, apply
from vtakit.compiler.backends.vta.te import conv2d_def
from vtakit.isa.config import HwConfig

CFG = HwConfig.preset("pynq")


def cached(s):
    return s.cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")


# ------------------------------------------------------------------ box
def conv6():
    # 6x6 image, 3x3 "same": axes n 1, oc 2, oh 6, ow 6, ic 2, kh 3, kw 3
    return conv2d_def(CFG, n=1, c_in=32, h=6, w=6, c_out=32, kh=3, kw=3, pad=1)


def tiled(fuse=False):
    # tiles of 4x4 outputs: oh.o, ow.o have 2 iterations each, the second a partial tile (6 - 4 = 2)
    s = (Schedule().tile("oh", "ow", 4, 4).split("ic", 1)
         .reorder("n", "oc", "oh.o", "ow.o", "ic.o", "oh.i", "ow.i", "ic.i", "kh", "kw"))
    if fuse:
        s = s.fuse("oh.o", "ow.o")
    tile = "oh.o+ow.o" if fuse else "ow.o"
    s = cached(s).dma_copy("out", tile).dma_copy("data", "ic.o").dma_copy("weight", "ic.o")
    return apply(conv6(), s.tensorize("oh.i", "gemm"))


def test_box_full_tile_at_compute_level():
    nest = tiled()
    env = {"n": 0, "oc": 1, "oh.o": 0, "ow.o": 0, "ic.o": 1}
    assert nest.box(env, 5) == {"n": (0, 1), "oc": (1, 1), "oh": (0, 4), "ow": (0, 4), "ic": (1, 1),
                                "kh": (0, 3), "kw": (0, 3)}


def test_box_partial_edge_tile():
    nest = tiled()
    # ow.o = 1 starts at 4, its 4 columns are cut to the 2 left (4, 5)
    env = {"n": 0, "oc": 0, "oh.o": 0, "ow.o": 1, "ic.o": 0}
    box = nest.box(env, 5)
    assert box["oh"] == (0, 4) and box["ow"] == (4, 2)
    env = {"n": 0, "oc": 0, "oh.o": 1, "ow.o": 1, "ic.o": 0}
    assert nest.box(env, 5)["oh"] == (4, 2)


def test_box_with_free_loops_spans_their_iterations():
    nest = tiled()
    # at level 4 (the output tile, once per ow.o iteration) ic.o is free: ic spans 1 + 1 * (2 - 1) = 2
    box = nest.box({"n": 0, "oc": 0, "oh.o": 1, "ow.o": 0}, 4)
    assert box == {"n": (0, 1), "oc": (0, 1), "oh": (4, 2), "ow": (0, 4), "ic": (0, 2),
                   "kh": (0, 3), "kw": (0, 3)}
    # at level 2 oh.o and ow.o are free too: oh spans 4 + 4 * (2 - 1) = 8, cut to 6
    box = nest.box({"n": 0, "oc": 1}, 2)
    assert box["oh"] == (0, 6) and box["ow"] == (0, 6) and box["oc"] == (1, 1)
    # at the root nothing is fixed
    assert nest.box({}, 0) == {a.name: (0, a.extent) for a in conv6().axes}


def test_box_fused_loops():
    nest = tiled(fuse=True)
    assert [lp.name for lp in nest.outer] == ["n", "oc", "oh.o+ow.o", "ic.o"]
    # fused value 3 = (oh.o 1, ow.o 1): the corner tile
    assert nest.expand({"oh.o+ow.o": 3}) == {"oh.o+ow.o": 3, "oh.o": 1, "ow.o": 1}
    box = nest.box({"n": 0, "oc": 0, "oh.o+ow.o": 3, "ic.o": 1}, 4)
    assert (box["oh"], box["ow"], box["ic"]) == ((4, 2), (4, 2), (1, 1))
    # fused value 1 = (oh.o 0, ow.o 1)
    box = nest.box({"n": 0, "oc": 0, "oh.o+ow.o": 1}, 3)
    assert (box["oh"], box["ow"], box["ic"]) == ((0, 4), (4, 2), (0, 2))
    # the fused loop free: both components span all their tiles
    box = nest.box({"n": 0, "oc": 0}, 2)
    assert (box["oh"], box["ow"]) == ((0, 6), (0, 6))


def test_box_outside_is_none():
    # oh 6 split by 2 -> 3 tiles; 2 virtual threads of ceil(3/2) = 2 tiles (oh.o.v stride 4,
    # oh.o.t stride 2): thread 1's second tile starts at 4 + 2 = 6, outside the axis
    s = Schedule().split("oh", 2).virtual_thread("oh.o", 2)
    s = cached(s).dma_copy("out", "oh.o.t").dma_copy("data", "oh.o.t").dma_copy("weight", "root")
    nest = apply(conv6(), s.tensorize("oh.i", "gemm"))
    assert [lp.name for lp in nest.outer] == ["n", "oc", "oh.o.v", "oh.o.t"]
    env = {"n": 0, "oc": 0, "oh.o.v": 1}
    assert nest.box({**env, "oh.o.t": 0}, 4)["oh"] == (4, 2)
    assert nest.box({**env, "oh.o.t": 1}, 4) is None
    # thread 1 as a whole: starts at 4, spans 2 + 2 * (2 - 1) = 4, cut to 2
    assert nest.box(env, 3)["oh"] == (4, 2)


# ------------------------------------------------------------------ walk
def summary(stmts, loops):
    """(kind, tensor, thread, values of `loops`) per statement; a loop not in env gives None."""
    return [(s.kind, s.tensor, s.thread, tuple(s.values.get(lp) for lp in loops)) for s in stmts]


def test_walk_order_without_threads():
    # 1x1 convolution, 2 output-channel blocks, 2 input-channel blocks, 2x2 image.
    # Loops n, oc, ic.o outside; weight once per oc (level 2), the output tile at oc (level 2),
    # data once per ic.o (level 3).
    c = conv2d_def(CFG, n=1, c_in=32, h=2, w=2, c_out=32, kh=1, kw=1)
    s = Schedule().split("ic", 1).reorder("n", "oc", "ic.o", "oh", "ow", "ic.i")
    s = cached(s).dma_copy("weight", "oc").dma_copy("out", "oc").dma_copy("data", "ic.o")
    nest = apply(c, s.tensorize("oh", "gemm"))
    got = summary(walk(nest), ["oc", "ic.o"])
    expected = []
    for oc in range(2):
        # a level's loads come first, then the output tile's start
        expected += [("load", "weight", 0, (oc, None)), ("out_begin", "out", 0, (oc, None))]
        for ic in range(2):
            expected += [("load", "data", 0, (oc, ic)), ("compute", "", 0, (oc, ic))]
        expected += [("out_end", "out", 0, (oc, None))]
    assert got == expected
    # a statement's env holds exactly the loops above its level
    assert walk(nest)[0].env == (("n", 0), ("oc", 0))


def test_walk_skips_tiles_outside_without_threads():
    # oh 3 split by 2 -> oh.o 2 tiles; split oh.o (outermost, may be uneven) by 3 -> oh.o.o 1, oh.o.i 3:
    # oh.o.i = 2 starts at 4 >= 3 and is skipped; oh.o.i = 1 is the partial tile (row 2)
    c = conv2d_def(CFG, n=1, c_in=16, h=3, w=2, c_out=16, kh=1, kw=1)
    s = Schedule().split("oh", 2).split("oh.o", 3)
    s = cached(s).dma_copy("weight", "root").dma_copy("out", "oh.o.i").dma_copy("data", "oh.o.i")
    nest = apply(c, s.tensorize("oh.i", "gemm"))
    got = summary(walk(nest), ["oh.o.i"])
    expected = [("load", "weight", 0, (None,))]
    for t in range(2):
        expected += [("load", "data", 0, (t,)), ("out_begin", "out", 0, (t,)), ("compute", "", 0, (t,)),
                     ("out_end", "out", 0, (t,))]
    assert got == expected


def test_walk_interleaves_virtual_threads_by_segments():
    # 1x1 convolution on a 3x2 image with 2 input-channel blocks: axes n 1, oc 1, oh 3, ow 2, ic 2.
    # oh split by 1 -> oh.o (3); virtual_thread(oh.o, 2): oh.o.v (2, stride 2), oh.o.t (2, stride 1).
    # Thread 0 computes rows 0, 1; thread 1 row 2 (its second tile, row 3, lies outside and is skipped).
    c = conv2d_def(CFG, n=1, c_in=32, h=3, w=2, c_out=16, kh=1, kw=1)
    s = (Schedule().split("oh", 1).split("ic", 1)
         .reorder("n", "oc", "oh.o", "ic.o", "oh.i", "ow", "ic.i", "kh", "kw")
         .virtual_thread("oh.o", 2))
    s = cached(s).dma_copy("out", "oh.o.t").dma_copy("data", "ic.o").dma_copy("weight", "ic.o")
    nest = apply(c, s.tensorize("oh.i", "gemm"))
    assert [lp.name for lp in nest.outer] == ["n", "oc", "oh.o.v", "oh.o.t", "ic.o"]

    def tile(v, t):
        """One thread's statements for one output tile, as segments: loads of one ic.o stay together."""
        segs = [[("out_begin", "out", v, (v, t, None))]]
        for ic in range(2):
            segs.append([("load", "data", v, (v, t, ic)), ("load", "weight", v, (v, t, ic))])
            segs.append([("compute", "", v, (v, t, ic))])
        segs.append([("out_end", "out", v, (v, t, None))])
        return segs

    thread0 = tile(0, 0) + tile(0, 1)     # 12 segments
    thread1 = tile(1, 0)                  # 6 segments
    expected = []
    for k in range(12):                   # lockstep: segment k of thread 0, then of thread 1
        expected += thread0[k]
        if k < len(thread1):
            expected += thread1[k]
    got = summary(walk(nest), ["oh.o.v", "oh.o.t", "ic.o"])
    assert got == expected
    # spot checks of the start: both threads open their tile, then thread 0's two loads back to back
    assert [g[:3] for g in got[:6]] == [("out_begin", "out", 0), ("out_begin", "out", 1),
                                        ("load", "data", 0), ("load", "weight", 0),
                                        ("load", "data", 1), ("load", "weight", 1)]
    assert len(got) == 24                 # 3 tiles x 8 statements
