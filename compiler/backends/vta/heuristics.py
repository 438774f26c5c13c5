"""Default schedules: knobs picked by an analytical cost model, not by tuning.

For a convolution, every combination of tile sizes, loop order, virtual-thread
axis and weight hoisting that fits the on-chip buffers is scored with a model
of the cycle simulator's rules: compute-module cycles (GEMM micro-ops, resets,
ALU epilogue, instruction overheads), memory-port cycles (every transfer's
bursts and beats, counting reloads the loop order implies), and, without
virtual threads, transfers that cannot overlap compute.  The cheapest wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.templates import ConvKnobs, EltwiseKnobs
from vtakit.isa.config import HwConfig
from vtakit.isa.arith import ceil_div

_INSN_OVERHEAD = 8          # issue + pipeline drain + fetch share, per GEMM/ALU instruction


@dataclass(frozen=True)
class CostFit:
    """What the analytical model cannot derive, fit to measured cycles (`benchmarks/fit_heuristic.py`,
    against the tuner's log `benchmarks/tuned_resnet18_pynq.jsonl` and the cycle model).

    With virtual threads the model overlaps all transfers with all compute; in the cycle model a step's
    loads only overlap the step before it, so where a step's loads outlast its GEMM (small reduction
    steps of a 1x1 convolution) the surplus shows: `imbalance` weighs it.  Each output tile's first loads
    wait for its slot to drain and only the other threads' compute hides them: `tile_stall` weighs one
    step's loads per tile over (threads - 1)^2, fewer as more threads interleave.  `vthreads` are the
    thread counts the search tries.  A fused residual's tile moved through INP (no LOAD.ACC8) is one
    more load each output tile waits for: `residual_stall` weighs it the same way."""

    imbalance: float = 0.0
    tile_stall: float = 0.0
    vthreads: tuple[int, ...] = (2, 1)
    residual_stall: float = 0.0


FIT = CostFit(imbalance=0.5, tile_stall=0.25, residual_stall=1.0, vthreads=(4, 3, 2, 1))
"""The grid point with the fewest cycles over C2-C11 (benchmarks/fit_heuristic.py, 27 points): 7,233,661
cycles, 91.6 % of peak (the tuner's best knobs: 7,286,499, 90.9 %); every layer as fast as its tuned knobs
or faster.  Refit after the micro-ops moved to one load up front (7,304,219, 90.7 % before).  Unfit
(CostFit()): 7,330,578, 90.4 %.  `residual_stall` (C2-C11 have no residual, so the grid does not see it) is
from `make demo`'s 8 fused convs: their compute module's token stalls are about one residual load per tile
over (threads - 1)^2; at 1.0 the layer1 convs take 2x2x56 tiles on 4 threads, 569,776 -> 563,313 cycles each."""


@dataclass(frozen=True)
class ConvShape:
    """A convolution in blocks: everything the cost model needs."""

    nb: int
    icb: int
    ocb: int
    h: int
    w: int
    kh: int
    kw: int
    stride: int
    pad: int
    epilogue_ops: int = 0   # ALU passes over each output tile (bias, shift, clip)
    planes: int = 1         # 4 when the int32 result leaves as byte planes
    residual: bool = False  # a fused residual add: an int8 tile per output tile (acc slot, or INP if no ACC8)
    vectors: int = 1        # per-channel acc vectors held beside each output tile (bias, per-channel shift)
    bias_wgt: bool = False  # the bias as WGT digit blocks added by a GEMM (lowering/bias.py), not an acc vector
    operand_steps: int = 0  # ALU steps reading a second acc entry (2 cycles per entry: one read port)

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.kh) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.kw) // self.stride + 1



def candidates(n: int, cap: int | None = None) -> list[int]:
    """Tile sizes worth trying for an extent: powers of two, even splits, the extent itself."""
    cap = min(n, cap or n)
    vals = {1, cap}
    p = 1
    while p <= cap:
        vals.add(p)
        p *= 2
    for parts in range(1, 9):
        vals.add(min(cap, ceil_div(n, parts)))
    return sorted(v for v in vals if v >= 1)


def _row_cycles(cfg: HwConfig, nbytes: int) -> float:
    """Port cycles of one contiguous run (bursts from an aligned start)."""
    return ceil_div(nbytes, cfg.burst_bytes) * cfg.mem_latency + ceil_div(nbytes, cfg.bus_bytes)


@dataclass(frozen=True)
class ConvTerms:
    """What a convolution schedule implies, in the cycle simulator's units: the cost model's
    inputs, and (in `vtakit.scheduling`) the tuner's features."""

    tiles: int              # output tiles
    steps: int              # reduction steps (tiles x input-channel tiles)
    inp_tile: int           # inp buffer entries of one thread's input tile
    wgt_tile: int           # wgt buffer entries of one weight tile
    acc_tile: int           # acc entries of one output tile
    kernel_uops: int        # GEMM micro-ops of one (oc, ic) block pair's kernel
    weight_loads: int       # weight tiles loaded over the run
    inp_cycles: float       # port cycles of one step's input load
    wgt_cycles: float       # port cycles of one weight tile load
    store_cycles: float     # port cycles of one output tile store
    port: float             # memory-port cycles over the run
    compute: float          # compute-module cycles over the run
    cycles: float           # the estimate: overlapped with virtual threads, serial without


def conv_terms(cfg: HwConfig, s: ConvShape, k: ConvKnobs, fit: CostFit = FIT) -> ConvTerms | None:
    """The terms of a convolution schedule, or None if it does not fit the buffers."""
    t_oc, t_oh, t_ow, t_ic = k.tile_oc, k.tile_oh, k.tile_ow, k.tile_ic
    n_oc, n_oh, n_ow, n_ic = ceil_div(s.ocb, t_oc), ceil_div(s.oh, t_oh), ceil_div(s.ow, t_ow), ceil_div(s.icb, t_ic)
    vt = k.vthreads
    vt_tiles = n_oc if k.vthread_axis == "oc" else n_oh
    if vt > 1 and vt_tiles < vt:
        return None
    if k.hoist_weights and n_ic > 1:
        return None
    rows = (t_oh - 1) * s.stride + s.kh
    cols = (t_ow - 1) * s.stride + s.kw
    dense_rows = s.kh == 1 and s.stride > 1
    inp_tile = t_ic * (t_oh if dense_rows else rows) * cols
    wgt_tile = t_oc * t_ic * s.kh * s.kw
    acc_tile = t_oc * t_oh * t_ow
    copies_w = 1 if (k.hoist_weights and k.vthread_axis == "oh" and k.order == "oc") else vt
    kernel = t_oc * t_ic * s.kh * s.kw
    moved = s.residual and not cfg.acc8_load  # lowering/move.py: the residual tile in INP, the identity in WGT
    res_inp, ident = (acc_tile, 1) if moved else (0, 0)
    res_acc = acc_tile if s.residual and cfg.acc8_load else 0
    bias_wgt, ones = (t_oc * vt, 1) if s.bias_wgt else (0, 0)
    if ((inp_tile + res_inp) * vt + ones > cfg.inp_depth or wgt_tile * copies_w + ident + bias_wgt > cfg.wgt_depth
            or (acc_tile + t_oc * s.vectors + res_acc) * vt > cfg.acc_depth or kernel * 2 * vt > cfg.uop_depth
            or t_oh * t_ow > 16383 or cols > 65535 or kernel > 16383):
        return None
    tiles = s.nb * n_oc * n_oh * n_ow
    steps = tiles * n_ic
    eb_inp, eb_wgt, eb_out = (cfg.elem_bytes(m) for m in (2, 1, 4))
    # Memory port: input rows per reduction step, weights as the order reuses them, outputs.
    data_rows = t_ic * min(t_oh if dense_rows else rows, s.h)
    inp_cycles = data_rows * _row_cycles(cfg, min(cols, s.w) * eb_inp)
    wgt_step = t_oc * _row_cycles(cfg, t_ic * s.kh * s.kw * eb_wgt)
    if k.hoist_weights:
        weight_loads = s.nb * n_oc * (1 if k.order == "oc" else n_oh * n_ow)
        if k.vthread_axis == "oc" or k.order != "oc":
            weight_loads = max(weight_loads, s.nb * n_oc)
    else:
        weight_loads = steps
    out_runs = t_oc * (1 if t_ow == s.ow else t_oh)
    store_cycles = out_runs * _row_cycles(cfg, acc_tile // out_runs * eb_out) * s.planes
    res_cycles = out_runs * _row_cycles(cfg, acc_tile // out_runs * eb_out) if s.residual else 0
    bias_cycles = _row_cycles(cfg, t_oc * eb_wgt) if s.bias_wgt else 0
    port = steps * inp_cycles + weight_loads * wgt_step + tiles * (store_cycles + res_cycles + bias_cycles)
    # Compute module: GEMM micro-ops, resets and epilogue passes, instruction overheads.
    gemm = steps * (t_oh * t_ow * kernel + _INSN_OVERHEAD)
    tile_ops = tiles * (acc_tile * (1 + s.epilogue_ops + s.operand_steps + (s.planes - 1))
                        + _INSN_OVERHEAD * (2 + s.epilogue_ops))
    uop_loads = _row_cycles(cfg, kernel * 2 * 4) + 1   # the kernels, loaded once at the start (codegen)
    compute = gemm + tile_ops + uop_loads
    first = inp_cycles + wgt_step
    if vt > 1:
        surplus = max(0.0, inp_cycles + (0 if k.hoist_weights else wgt_step) - (t_oh * t_ow * kernel + _INSN_OVERHEAD))
        cycles = (max(compute + fit.imbalance * steps * surplus, port) + first + store_cycles
                  + 0.02 * min(compute, port) + fit.tile_stall * tiles * (inp_cycles + wgt_step) / (vt - 1) ** 2
                  + (fit.residual_stall * tiles * res_cycles / (vt - 1) ** 2 if moved else 0))
    else:  # one thread: a step's loads cannot overlap its own compute
        cycles = compute + steps * inp_cycles + weight_loads * wgt_step + store_cycles + tiles * res_cycles
    return ConvTerms(tiles, steps, inp_tile, wgt_tile, acc_tile, kernel, weight_loads, inp_cycles, wgt_step,
                     store_cycles, port, compute, cycles)


def conv_cost(cfg: HwConfig, s: ConvShape, k: ConvKnobs, fit: CostFit = FIT) -> float | None:
    """Estimated cycles of a convolution schedule, or None if it does not fit."""
    terms = conv_terms(cfg, s, k, fit)
    return None if terms is None else terms.cycles


def conv_shape(cfg: HwConfig, *, n: int, c_in: int, h: int, w: int, c_out: int, kh: int, kw: int,
               stride: int, pad: int, epilogue_ops: int, planes: int, residual: bool = False,
               vectors: int = 1, bias_wgt: bool = False, operand_steps: int = 0) -> ConvShape:
    return ConvShape(ceil_div(n, cfg.batch), ceil_div(c_in, cfg.block_in), ceil_div(c_out, cfg.block_out),
                     h, w, kh, kw, stride, pad, epilogue_ops, planes, residual=residual, vectors=vectors,
                     bias_wgt=bias_wgt, operand_steps=operand_steps)


@lru_cache(maxsize=256)
def default_conv_knobs(cfg: HwConfig, s: ConvShape, vthreads: int | None = None, fit: CostFit = FIT) -> ConvKnobs:
    """The knobs with the lowest estimated cycles; CompileError if nothing fits.  Cached: the
    reduction packing (`packing.py`) scores a shape before the compiler compiles it."""
    best: tuple[float, ConvKnobs] | None = None
    vt_options = [vthreads] if vthreads else list(fit.vthreads)
    for t_oc, t_ic, t_oh, t_ow in product(candidates(s.ocb), candidates(s.icb), candidates(s.oh),
                                          candidates(s.ow)):
        for order, axis, vt, hoist in product(("oc", "sp"), ("oh", "oc"), vt_options, (False, True)):
            if vt == 1 and axis == "oc":
                continue
            k = ConvKnobs(t_oc, t_oh, t_ow, t_ic, order, axis, vt, hoist)
            cost = conv_cost(cfg, s, k, fit)
            if cost is not None and (best is None or cost < best[0]):
                best = (cost, k)
    if best is None:
        most = max(s.ocb, s.oh)
        if vthreads and vthreads > most:
            raise CompileError(f"{vthreads} virtual threads need as many tiles, but this convolution has "
                               f"at most {most} (output-channel blocks or rows)", op="conv2d")
        raise CompileError(f"no tiling of this convolution fits the buffers of config {cfg.label}",
                           op="conv2d")
    return best[1]


def default_eltwise_knobs(cfg: HwConfig, *, nb: int, cb: int, h: int, w: int, tensors: int,
                          window: tuple[int, int, int] | None = None,
                          vthreads: int | None = None) -> EltwiseKnobs:
    """Largest row tiles whose acc slots (output plus inputs, per thread) fit, and, without LOAD.ACC8,
    the inputs' INP staging slots.

    `window` = (kernel, stride, pad) for pooling, whose input tile has a halo."""
    vt = vthreads or 2
    for t_h in sorted(candidates(h), reverse=True):
        for t_c in sorted(candidates(cb), reverse=True):
            threads = min(vt, ceil_div(h, t_h))
            if window:
                k, st, _ = window
                in_rows, in_cols = (t_h - 1) * st + k, (w - 1) * st + k
                need = t_c * (t_h * w + in_rows * in_cols)
            else:
                need = t_c * t_h * w * tensors
            staged = (need - t_c * t_h * w) if not cfg.acc8_load else 0  # int8 inputs staged in INP (move.py)
            if need * threads <= cfg.acc_depth and staged * threads <= cfg.inp_depth and t_h * w * t_c <= 16383:
                return EltwiseKnobs(t_c, t_h, threads)
    raise CompileError(f"one row of this {h}x{w} tensor does not fit the acc buffer of config "
                       f"{cfg.label}; elementwise tiling is by whole rows", op="eltwise")
