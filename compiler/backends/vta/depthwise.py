"""Depthwise convolutions on the GEMM core, as a block-diagonal GEMM.

A depthwise convolution has no reduction over input channels: output channel c
reads only input channel c.  On the accelerator each block of `block_out`
channels becomes one GEMM whose weight block is diagonal (channel c's tap on the
diagonal, zeros elsewhere), so the input tile of a channel block is read by the
weight block of the same channel block; the reduction runs over the kernel
window only.  The GEMM does block_in times the useful multiply-accumulates, but
one micro-op per output pixel, channel block and tap still beats a host round
trip of the activation (`host_cycles`); configurations with block_in != block_out
have no diagonal block and keep depthwise convolutions on the host.

Pads are (top, left, bottom, right): the data index starts at -top/-left and
reads past the bottom/right edge see zeros (DMA padding), so asymmetric "same"
padding (stride 2: (0, 0, 1, 1)) costs nothing extra.

The bias is added by one GEMM micro-op per output entry where its values fit the lanes
(`bias_gemm`, `lowering/bias.py`: the `ones` INP entry times a WGT block of the bias's digits, loaded
once per channel tile by the load module), instead of an ALU ADD reading an acc vector (two compute
cycles per entry, the vector loaded by LOAD.ACC on the compute module); a bias beyond the lanes keeps
the ALU ADD.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import product
import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.codegen import CompiledOp, lower
from vtakit.compiler.backends.vta.heuristics import _INSN_OVERHEAD, _row_cycles, candidates
from vtakit.compiler.backends.vta.runtime import resolve_device, run_compiled
from vtakit.compiler.backends.vta.schedule import Schedule, apply
from vtakit.compiler.backends.vta.te import Access, Axis, ComputeDef, Tensor, epilogue
from vtakit.isa.arith import ceil_div
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId

Pads = tuple[int, int, int, int]


def depthwise_reason(cfg: HwConfig) -> str | None:
    """Why `cfg` cannot run a depthwise convolution as a block-diagonal GEMM (None if it can)."""
    if cfg.block_in != cfg.block_out:
        return (f"a depthwise convolution needs diagonal weight blocks: block_in {cfg.block_in} != "
                f"block_out {cfg.block_out} on {cfg.label}")
    return None


def out_size(size: int, k: int, stride: int, lo: int, hi: int) -> int:
    return (size + lo + hi - k) // stride + 1


@dataclass(frozen=True)
class DepthwiseShape:
    """A depthwise convolution in blocks: what the cost model needs."""

    nb: int
    cb: int
    h: int
    w: int
    kh: int
    kw: int
    stride: int
    pads: Pads
    epilogue_ops: int   # ALU cycles per output entry (a step reading a vector operand takes two)
    vectors: int        # per-channel acc vectors beside each output tile (bias by ALU ADD, shift, mult)
    bias_wgt: bool = False  # the bias as WGT digit blocks added by a GEMM (lowering/bias.py)

    @property
    def oh(self) -> int:
        return out_size(self.h, self.kh, self.stride, self.pads[0], self.pads[2])

    @property
    def ow(self) -> int:
        return out_size(self.w, self.kw, self.stride, self.pads[1], self.pads[3])


@dataclass(frozen=True)
class DepthwiseKnobs:
    """Tile sizes (channel blocks, output rows, output columns) and virtual threads over row tiles."""

    tile_c: int
    tile_oh: int
    tile_ow: int
    vthreads: int = 2

    def to_dict(self) -> dict:
        return asdict(self)


def depthwise_def(cfg: HwConfig, *, n: int, c: int, h: int, w: int, kh: int, kw: int, stride: int, pads: Pads,
                  bias: bool = False, shift: int | None = None, clip: tuple[int, int] | None = None,
                  channel_shift: bool = False, pre_shift: int | None = None, bias_gemm: bool = False,
                  name: str = "depthwise") -> ComputeDef:
    """Depthwise convolution in NCHW{batch}n{block}c; weights (C/block, KH, KW) diagonal blocks.  `pre_shift`
    not None: the epilogue multiplies by a per-channel vector `mult` after that shift (quant/techniques/fixed_point.py).
    `bias_gemm`: the bias is WGT digit blocks (`lowering.pack_bias_weight`) added by a GEMM."""
    reason = depthwise_reason(cfg)
    if reason:
        raise CompileError(reason, op=name)
    top, left, bottom, right = pads
    oh, ow = out_size(h, kh, stride, top, bottom), out_size(w, kw, stride, left, right)
    if oh < 1 or ow < 1:
        raise CompileError(f"kernel {kh}x{kw} with pads {pads} does not fit a {h}x{w} input", op=name)
    nb, cb = ceil_div(n, cfg.batch), ceil_div(c, cfg.block_out)
    axes = (Axis("n", nb), Axis("c", cb), Axis("oh", oh), Axis("ow", ow), Axis("kh", kh, True),
            Axis("kw", kw, True))
    v = Affine.var
    data = Access(Tensor("data", (nb, cb, h, w), MemId.INP),
                  (v("n"), v("c"), v("oh", stride) + v("kh") - top, v("ow", stride) + v("kw") - left))
    weight = Access(Tensor("weight", (cb, kh, kw), MemId.WGT, pad="error"), (v("c"), v("kh"), v("kw")))
    bias_mem = MemId.WGT if bias_gemm else MemId.ACC
    bias_acc = Access(Tensor("bias", (cb,), bias_mem, pad="error"), (v("c"),)) if bias else None
    shift_acc = Access(Tensor("shift", (cb,), MemId.ACC, pad="error"), (v("c"),)) if channel_shift else None
    mult_acc = Access(Tensor("mult", (cb,), MemId.ACC, pad="error"), (v("c"),)) if pre_shift is not None else None
    out = Access(Tensor("out", (nb, cb, oh, ow), MemId.OUT, pad="error"), (v("n"), v("c"), v("oh"), v("ow")))
    requant = shift is not None or clip is not None or channel_shift or pre_shift is not None
    return ComputeDef(name, axes, out, reduce="gemm", data=data, weight=weight,
                      steps=epilogue(cfg, bias_acc, shift, clip, shift_acc, mult_acc, pre_shift or 0),
                      out_planes=1 if requant else 4)


def depthwise_schedule(k: DepthwiseKnobs, *, bias: bool, channel_shift: bool, pre_shift: int | None = None,
                       bias_gemm: bool = False) -> Schedule:
    """Channel tiles outermost, each tile's weights, bias (digit blocks with `bias_gemm`) and per-channel
    vectors loaded once; input tile (with its halo) per output tile.  Vectors once per channel tile, not per
    output tile: the compute module's LOAD.ACC waits behind the tile DMAs for the shared memory port."""
    s = Schedule().split("c", k.tile_c).split("oh", k.tile_oh).split("ow", k.tile_ow)
    s = s.reorder("n", "c.o", "oh.o", "ow.o", "oh.i", "ow.i", "c.i", "kh", "kw")
    if k.vthreads > 1:
        s = s.virtual_thread("oh.o", k.vthreads)
    tile_loop = "ow.o"                 # the innermost tile loop: one output tile per iteration
    s = (s.cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")
         .dma_copy("data", tile_loop).dma_copy("out", tile_loop).dma_copy("weight", "c.o"))
    if bias and bias_gemm:
        s = s.cache_read("bias", "wgt").dma_copy("bias", "c.o")
    elif bias:
        s = s.cache_read("bias", "acc").dma_copy("bias", "c.o")
    if channel_shift:
        s = s.cache_read("shift", "acc").dma_copy("shift", "c.o")
    if pre_shift is not None:
        s = s.cache_read("mult", "acc").dma_copy("mult", "c.o")
    return s.tensorize("oh.i", "gemm")


def depthwise_cost(cfg: HwConfig, s: DepthwiseShape, k: DepthwiseKnobs) -> float | None:
    """Estimated cycles (the cycle simulator's units), or None when the tiles do not fit the buffers."""
    n_c, n_oh, n_ow = ceil_div(s.cb, k.tile_c), ceil_div(s.oh, k.tile_oh), ceil_div(s.ow, k.tile_ow)
    vt = k.vthreads
    if vt > 1 and n_oh < vt:
        return None
    rows = (k.tile_oh - 1) * s.stride + s.kh
    cols = (k.tile_ow - 1) * s.stride + s.kw
    inp_tile = k.tile_c * rows * cols
    wgt_tile = k.tile_c * (s.kh * s.kw + s.bias_wgt)
    ones = 1 if s.bias_wgt else 0      # the bias GEMM's `ones` INP entry
    acc_tile = k.tile_c * k.tile_oh * k.tile_ow
    kernel = k.tile_c * s.kh * s.kw
    if (inp_tile * vt + ones > cfg.inp_depth or wgt_tile * vt > cfg.wgt_depth
            or (acc_tile + k.tile_c * s.vectors) * vt > cfg.acc_depth or kernel * 2 * vt > cfg.uop_depth
            or k.tile_oh * k.tile_ow > 16383 or cols > 65535):
        return None
    tiles = s.nb * n_c * n_oh * n_ow
    eb_inp, eb_wgt, eb_out = (cfg.elem_bytes(m) for m in (2, 1, 4))
    inp_cycles = k.tile_c * min(rows, s.h) * _row_cycles(cfg, min(cols, s.w) * eb_inp)
    wgt_cycles = k.tile_c * _row_cycles(cfg, s.kh * s.kw * eb_wgt) + (_row_cycles(cfg, k.tile_c * eb_wgt)
                                                                       if s.bias_wgt else 0)
    out_runs = k.tile_c * (1 if k.tile_ow == s.ow else k.tile_oh)
    store_cycles = out_runs * _row_cycles(cfg, acc_tile // out_runs * eb_out)
    port = tiles * (inp_cycles + store_cycles) + s.nb * n_c * wgt_cycles
    compute = tiles * (k.tile_oh * k.tile_ow * kernel + _INSN_OVERHEAD
                       + acc_tile * (1 + s.epilogue_ops) + _INSN_OVERHEAD * (2 + s.epilogue_ops)
                       + 2 * (_row_cycles(cfg, kernel * 4) + 1))
    if vt > 1:
        return max(compute, port) + inp_cycles + wgt_cycles + store_cycles + 0.02 * min(compute, port)
    return compute + port


@lru_cache(maxsize=256)
def ranked_depthwise_knobs(cfg: HwConfig, s: DepthwiseShape) -> tuple[DepthwiseKnobs, ...]:
    """Every tiling that fits the buffers, by estimated cycles (ties in enumeration order); CompileError if none."""
    scored = []
    for t_c, t_oh, t_ow, vt in product(candidates(s.cb), candidates(s.oh), candidates(s.ow), (2, 1)):
        k = DepthwiseKnobs(t_c, t_oh, t_ow, vt)
        cost = depthwise_cost(cfg, s, k)
        if cost is not None:
            scored.append((cost, len(scored), k))
    if not scored:
        raise CompileError(f"no tiling of this depthwise convolution fits the buffers of config {cfg.label}",
                           op="depthwise")
    return tuple(k for _, _, k in sorted(scored, key=lambda t: t[:2]))


def default_depthwise_knobs(cfg: HwConfig, s: DepthwiseShape) -> DepthwiseKnobs:
    """The knobs with the lowest estimated cycles; CompileError if no tiling fits the buffers."""
    return ranked_depthwise_knobs(cfg, s)[0]


REFINE_BAND = 0.15
"""Where the cost model's pick runs within this fraction of the host round trip (either side), whether the
layer earns its place on the accelerator hinges on the tiling, and the estimate can be 15 % off: then the
next REFINE_TILINGS estimates are run on the cycle model too (on zeros, about 0.1 s each) and the fastest
kept.  `mobilenet_v1`'s 1x512x14x14 layers: 116,704 -> 113,347 cycles against a 115,405-cycle round trip."""
REFINE_TILINGS = 12


HOST_GMACS = 1.0
"""int8 multiply-accumulates per nanosecond a board's host CPU sustains on a depthwise convolution (a
Cortex-A9 with NEON, PYNQ's host, does about 1 GMAC/s): the host side of the placement cost model."""


def host_cycles(cfg: HwConfig, s: DepthwiseShape) -> float:
    """What leaving the convolution to the host costs, in accelerator cycles: the input read back from DRAM
    and the result written again at the bus rate, and the host's multiply-accumulates at HOST_GMACS."""
    c = s.cb * cfg.block_out
    moved = s.nb * cfg.batch * c * (s.h * s.w + s.oh * s.ow)
    macs = s.nb * cfg.batch * c * s.oh * s.ow * s.kh * s.kw
    return moved / cfg.bus_bytes + macs / (HOST_GMACS * 1e3 / cfg.clock_mhz)


@lru_cache(maxsize=256)
def simulated_cycles(cfg: HwConfig, *, x_shape, kernel: tuple[int, int], stride: int, pads: Pads, bias: bool,
                     shift: int | None, clip: tuple[int, int] | None, channel_shift: bool,
                     pre_shift: int | None = None, bias_gemm: bool = False,
                     name: str = "depthwise") -> int:
    """The cycle model's count for the default compiled depthwise convolution, run once on zeros (its timing
    does not depend on the values).  Cached with the program: the partition asks again for each reader of
    the result, and lowering then takes the same program."""
    bias_gemm = bias and bias_gemm
    op, _, cycles = _compile_default(cfg, tuple(x_shape), tuple(kernel), stride, tuple(pads), bias, shift, clip,
                                     channel_shift, pre_shift, bias_gemm, name)
    return cycles if cycles is not None else _cycles_on_zeros(cfg, op)


def _cycles_on_zeros(cfg: HwConfig, op: CompiledOp) -> int:
    zeros = {name: np.zeros(op.tensors[name].nbytes(cfg), np.uint8) for name in op.inputs}
    return run_compiled(op, resolve_device("sim", cfg), zeros)[1].cycles


def depthwise_choice(cfg: HwConfig, *, x_shape, kernel: tuple[int, int], stride: int, pads: Pads,
                     bias: bool = False, shift: int | None = None, clip: tuple[int, int] | None = None,
                     channel_shift: bool = False, pre_shift: int | None = None, bias_gemm: bool = False,
                     name: str = "depthwise") -> str | None:
    """None when the cycle model runs the depthwise convolution on the accelerator in fewer cycles than its
    host round trip (`host_cycles`), else why it stays on the host (`bias_gemm`: the bias added by GEMM)."""
    n, c, h, w = x_shape
    kernel, pads = tuple(kernel), tuple(pads)
    try:
        compute = depthwise_def(cfg, n=n, c=c, h=h, w=w, kh=kernel[0], kw=kernel[1], stride=stride, pads=pads,
                                bias=bias, shift=shift, clip=clip, channel_shift=channel_shift, pre_shift=pre_shift,
                                bias_gemm=bias_gemm)
        shape = depthwise_shape(cfg, n=n, c=c, h=h, w=w, kh=kernel[0], kw=kernel[1], stride=stride, pads=pads,
                                compute=compute)
        accel = simulated_cycles(cfg, x_shape=tuple(x_shape), kernel=kernel, stride=stride, pads=pads, bias=bias,
                                 shift=shift, clip=clip, channel_shift=channel_shift, pre_shift=pre_shift,
                                 bias_gemm=bias_gemm, name=name)
    except CompileError as e:
        return str(e)
    host = host_cycles(cfg, shape)
    if accel > host:
        return f"the host round trip is cheaper: {host:,.0f} cycles vs {accel:,} on the cycle model"
    return None


def depthwise_shape(cfg: HwConfig, *, n: int, c: int, h: int, w: int, kh: int, kw: int, stride: int, pads: Pads,
                    compute: ComputeDef) -> DepthwiseShape:
    """The cost model's view of `compute`: an ALU step reading an acc vector costs two passes, the bias
    GEMM (a WGT operand) one micro-op per entry."""
    vectors = sum(1 for st in compute.steps if st.operand is not None and st.operand.tensor.mem == MemId.ACC)
    gemms = sum(1 for st in compute.steps if st.operand is not None and st.operand.tensor.mem == MemId.WGT)
    return DepthwiseShape(ceil_div(n, cfg.batch), ceil_div(c, cfg.block_out), h, w, kh, kw, stride, tuple(pads),
                          (len(compute.steps) - gemms + vectors) * cfg.alu_ii + gemms, max(1, vectors), gemms > 0)


def compile_depthwise(cfg: HwConfig, *, x_shape, kernel: tuple[int, int], stride: int, pads: Pads,
                      bias: bool = False, shift: int | None = None, clip: tuple[int, int] | None = None,
                      channel_shift: bool = False, pre_shift: int | None = None, bias_gemm: bool = False,
                      schedule: DepthwiseKnobs | dict | None = None,
                      name: str = "depthwise") -> tuple[CompiledOp, DepthwiseKnobs]:
    """Compile a depthwise convolution; returns the relocatable program and the knobs used.  With the
    default knobs the result is cached: the partition compiles each layer to count its cycles
    (`simulated_cycles`), and lowering then takes the same program.  `bias_gemm`: the `bias` input is WGT
    digit blocks (`lowering.pack_bias_weight`, where `lowering.bias_fits`), else an int32 acc vector."""
    bias_gemm = bias and bias_gemm
    _check_geometry(stride, pads, name)
    if schedule is None:
        return _compile_default(cfg, tuple(x_shape), tuple(kernel), stride, tuple(pads), bias, shift, clip,
                                channel_shift, pre_shift, bias_gemm, name)[:2]
    return _compile(cfg, x_shape=x_shape, kernel=kernel, stride=stride, pads=pads, bias=bias, shift=shift,
                    clip=clip, channel_shift=channel_shift, pre_shift=pre_shift, bias_gemm=bias_gemm,
                    schedule=schedule, name=name)


@lru_cache(maxsize=64)
def _compile_default(cfg: HwConfig, x_shape, kernel, stride, pads, bias, shift, clip, channel_shift, pre_shift,
                     bias_gemm, name) -> tuple[CompiledOp, DepthwiseKnobs, int | None]:
    """(program, knobs, its cycles on the cycle model or None where not run) for the default knobs: the cost
    model's pick, refined on the cycle model where it runs within REFINE_BAND of the host round trip."""
    def build(knobs: DepthwiseKnobs) -> tuple[CompiledOp, DepthwiseKnobs]:
        return _compile(cfg, x_shape=x_shape, kernel=kernel, stride=stride, pads=pads, bias=bias, shift=shift,
                        clip=clip, channel_shift=channel_shift, pre_shift=pre_shift, bias_gemm=bias_gemm,
                        schedule=knobs, name=name)

    n, c, h, w = x_shape
    compute = depthwise_def(cfg, n=n, c=c, h=h, w=w, kh=kernel[0], kw=kernel[1], stride=int(stride), pads=pads,
                            bias=bias, shift=shift, clip=clip, channel_shift=channel_shift, pre_shift=pre_shift,
                            bias_gemm=bias_gemm, name=name)
    shape = depthwise_shape(cfg, n=n, c=c, h=h, w=w, kh=kernel[0], kw=kernel[1], stride=int(stride), pads=pads,
                            compute=compute)
    ranked, host = ranked_depthwise_knobs(cfg, shape), host_cycles(cfg, shape)
    op, knobs = build(ranked[0])
    if abs(depthwise_cost(cfg, shape, knobs) - host) > 2 * REFINE_BAND * host:
        return op, knobs, None  # far from the host's cost: the tiling decides nothing
    best = (_cycles_on_zeros(cfg, op), op, knobs)
    if abs(best[0] - host) <= REFINE_BAND * host:
        for k in ranked[1:REFINE_TILINGS]:
            other, _ = build(k)
            best = min(best, (_cycles_on_zeros(cfg, other), other, k), key=lambda t: t[0])
    return best[1], best[2], best[0]


def _check_geometry(stride, pads, name: str) -> None:
    if not isinstance(stride, (int, np.integer)) or stride < 1 or len(pads) != 4 or min(pads) < 0:
        raise CompileError(f"stride must be >= 1 and pads four values >= 0, got {stride}, {pads}", op=name)


def _compile(cfg: HwConfig, *, x_shape, kernel, stride, pads, bias, shift, clip, channel_shift, schedule,
             name, pre_shift=None, bias_gemm=False) -> tuple[CompiledOp, DepthwiseKnobs]:
    """The program for explicit knobs (a DepthwiseKnobs or its dict)."""
    n, c, h, w = x_shape
    kh, kw = kernel
    compute = depthwise_def(cfg, n=n, c=c, h=h, w=w, kh=kh, kw=kw, stride=int(stride), pads=tuple(pads),
                            bias=bias, shift=shift, clip=clip, channel_shift=channel_shift, pre_shift=pre_shift,
                            bias_gemm=bias_gemm, name=name)
    if isinstance(schedule, dict):
        try:
            schedule = DepthwiseKnobs(**schedule)
        except TypeError as e:
            raise CompileError(f"bad depthwise schedule knobs: {e}", op=name) from None
    sched = depthwise_schedule(schedule, bias=bias, channel_shift=channel_shift, pre_shift=pre_shift,
                               bias_gemm=bias_gemm)
    return lower(apply(compute, sched), cfg, name), schedule


def pack_depthwise_weight(w: np.ndarray, block: int) -> np.ndarray:
    """(C, 1, KH, KW) -> (C/block, KH, KW, block, block): channel c's taps on the diagonal of its block."""
    c, _, kh, kw = w.shape
    cb = ceil_div(c, block)
    padded = np.zeros((cb * block, kh, kw), dtype=w.dtype)
    padded[:c] = w[:, 0]
    out = np.zeros((cb, kh, kw, block, block), dtype=w.dtype)
    idx = np.arange(block)
    out[:, :, :, idx, idx] = padded.reshape(cb, block, kh, kw).transpose(0, 2, 3, 1)
    return out
