"""Schedule templates: the knobs of each operator's schedule, and the schedule they make.

A template turns a small set of knobs (tile sizes, loop order, virtual threads,
where transfers sit) into a `Schedule` of primitives.  The default heuristic
(`heuristics.py`) and the tuner (`vtakit.scheduling`) search over knobs, never over raw
primitive lists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vtakit.compiler.backends.vta.schedule import Schedule


@dataclass(frozen=True)
class ConvKnobs:
    """Knobs of a convolution (dense is a 1x1 convolution on a 1x1 image)."""

    tile_oc: int           # output-channel blocks per tile
    tile_oh: int           # output rows per tile
    tile_ow: int           # output columns per tile
    tile_ic: int           # input-channel blocks per reduction step
    order: str = "oc"      # "oc": channel tiles outermost (weights reused across space); "sp": space outermost
    vthread_axis: str = "oh"
    vthreads: int = 2
    hoist_weights: bool = False
    """Load each weight tile once per output-channel tile, not once per reduction step
    (needs tile_ic to cover every input-channel block)."""

    def to_dict(self) -> dict:
        return asdict(self)


def conv_schedule(k: ConvKnobs, *, bias: bool = False, residual: bool = False,
                  channel_shift: bool = False, bias_gemm: bool = False, interleave: bool = False,
                  multiplier: bool = False) -> Schedule:
    """The schedule a ConvKnobs describes (per-channel vectors, bias, shift and multiplier, load with each output tile;
    with `bias_gemm` the bias's digit blocks sit in wgt, lowering/bias.py).

    Virtual threads take contiguous runs of tiles; with `interleave` thread v takes every vthreads-th
    tile instead, so the threads' tiles finish in loop order (a fused pool's halo passes in order)."""
    s = Schedule()
    for axis, factor in (("oc", k.tile_oc), ("oh", k.tile_oh), ("ow", k.tile_ow), ("ic", k.tile_ic)):
        s = s.split(axis, factor)
    channel, space = ["oc.o"], ["oh.o", "ow.o"]
    outer = ["n"] + (channel + space if k.order == "oc" else space + channel)
    s = s.reorder(*outer, "ic.o", "oh.i", "ow.i", "oc.i", "ic.i", "kh", "kw")
    names = {name: name for name in outer}
    if k.vthreads > 1 and interleave:
        loop = f"{k.vthread_axis}.o"
        s = s.split(loop, k.vthreads).virtual_thread(f"{loop}.i", k.vthreads)
        names[loop] = f"{loop}.i.t"
    elif k.vthreads > 1:
        loop = f"{k.vthread_axis}.o"
        s = s.virtual_thread(loop, k.vthreads)
        names[loop] = f"{loop}.t"
    tile_loop = names[outer[-1]]           # the output tile lives across the reduction
    s = (s.cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")
         .dma_copy("data", "ic.o").dma_copy("out", tile_loop))
    s = s.dma_copy("weight", names["oc.o"] if k.hoist_weights else "ic.o")
    vectors = names["oc.o"]   # per-channel vectors: once per output-channel tile (the tile loop when it is innermost)
    if bias:
        s = s.cache_read("bias", "wgt" if bias_gemm else "acc").dma_copy("bias", vectors)
    if residual:  # the fused residual add's int8 operand, one tile per output tile
        s = s.cache_read("res", "acc").dma_copy("res", tile_loop)
    if channel_shift:
        s = s.cache_read("shift", "acc").dma_copy("shift", vectors)
    if multiplier:
        s = s.cache_read("mult", "acc").dma_copy("mult", vectors)
    return s.tensorize("oh.i", "gemm")


@dataclass(frozen=True)
class EltwiseKnobs:
    """Knobs of elementwise operators and pooling: rows and channel blocks per tile."""

    tile_c: int
    tile_h: int
    vthreads: int = 2

    def to_dict(self) -> dict:
        return asdict(self)


def eltwise_schedule(k: EltwiseKnobs, *, inputs: tuple[str, ...], pool: bool = False) -> Schedule:
    """Tiles of whole rows; every input cached in acc; threads over row tiles.

    For pooling the axes are (c, oh, ow) with the window (kh, kw) inside the tile."""
    h, w = ("oh", "ow") if pool else ("h", "w")
    s = Schedule().split("c", k.tile_c).split(h, k.tile_h)
    inner = [f"{h}.i", w, "c.i"] + (["kh", "kw"] if pool else [])
    s = s.reorder("n", "c.o", f"{h}.o", *inner)
    tile_loop = f"{h}.o"
    if k.vthreads > 1:
        s = s.virtual_thread(f"{h}.o", k.vthreads)
        tile_loop = f"{h}.o.t"
    s = s.cache_write("out", "acc").dma_copy("out", tile_loop)
    for name in inputs:
        s = s.cache_read(name, "acc").dma_copy(name, tile_loop)
    return s.tensorize(f"{h}.i", "alu")
