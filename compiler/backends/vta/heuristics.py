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

import numpy as np

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
    return _hw(cfg).row(nbytes)


@dataclass(frozen=True)
class _Hw:
    """The configuration's figures the cost model reads for every candidate, worked out once per
    configuration (`HwConfig.depth` and `elem_bytes` are methods that recompute them on each call:
    about a third of the search's time before issue 43)."""

    inp_depth: int
    wgt_depth: int
    acc_depth: int
    uop_depth: int
    eb_inp: int
    eb_wgt: int
    eb_out: int
    burst: int
    latency: int
    bus: int
    acc8_load: bool

    def row(self, nbytes):
        """`_row_cycles` on these figures; `nbytes` an int or an int64 array."""
        return ceil_div(nbytes, self.burst) * self.latency + ceil_div(nbytes, self.bus)


@lru_cache(maxsize=64)
def _hw(cfg: HwConfig) -> _Hw:
    return _Hw(cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.uop_depth, *(cfg.elem_bytes(m) for m in (2, 1, 4)),
               cfg.burst_bytes, cfg.mem_latency, cfg.bus_bytes, cfg.acc8_load)


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
    """The terms of a convolution schedule, or None if it does not fit the buffers.  The definition of the
    cost model: `_search_costs` is its numpy transcription for the search (test_schedule_table.py checks
    the two agree to the bit on every candidate of the recorded shapes)."""
    hw = _hw(cfg)
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
    moved = s.residual and not hw.acc8_load  # lowering/move.py: the residual tile in INP, the identity in WGT
    res_inp, ident = (acc_tile, 1) if moved else (0, 0)
    res_acc = acc_tile if s.residual and hw.acc8_load else 0
    bias_wgt, ones = (t_oc * vt, 1) if s.bias_wgt else (0, 0)
    if ((inp_tile + res_inp) * vt + ones > hw.inp_depth or wgt_tile * copies_w + ident + bias_wgt > hw.wgt_depth
            or (acc_tile + t_oc * s.vectors + res_acc) * vt > hw.acc_depth or kernel * 2 * vt > hw.uop_depth
            or t_oh * t_ow > 16383 or cols > 65535 or kernel > 16383):
        return None
    tiles = s.nb * n_oc * n_oh * n_ow
    steps = tiles * n_ic
    eb_inp, eb_wgt, eb_out = hw.eb_inp, hw.eb_wgt, hw.eb_out
    # Memory port: input rows per reduction step, weights as the order reuses them, outputs.
    data_rows = t_ic * min(t_oh if dense_rows else rows, s.h)
    inp_cycles = data_rows * hw.row(min(cols, s.w) * eb_inp)
    wgt_step = t_oc * hw.row(t_ic * s.kh * s.kw * eb_wgt)
    if k.hoist_weights:
        weight_loads = s.nb * n_oc * (1 if k.order == "oc" else n_oh * n_ow)
        if k.vthread_axis == "oc" or k.order != "oc":
            weight_loads = max(weight_loads, s.nb * n_oc)
    else:
        weight_loads = steps
    out_runs = t_oc * (1 if t_ow == s.ow else t_oh)
    store_cycles = out_runs * hw.row(acc_tile // out_runs * eb_out) * s.planes
    res_cycles = out_runs * hw.row(acc_tile // out_runs * eb_out) if s.residual else 0
    bias_cycles = hw.row(t_oc * eb_wgt) if s.bias_wgt else 0
    port = steps * inp_cycles + weight_loads * wgt_step + tiles * (store_cycles + res_cycles + bias_cycles)
    # Compute module: GEMM micro-ops, resets and epilogue passes, instruction overheads.
    gemm = steps * (t_oh * t_ow * kernel + _INSN_OVERHEAD)
    tile_ops = tiles * (acc_tile * (1 + s.epilogue_ops + s.operand_steps + (s.planes - 1))
                        + _INSN_OVERHEAD * (2 + s.epilogue_ops))
    uop_loads = hw.row(kernel * 2 * 4) + 1   # the kernels, loaded once at the start (codegen)
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


_INNER = tuple(product(("oc", "sp"), ("oh", "oc")))
"""(order, vthread_axis) pairs in the search's order; inside each, the thread counts, then hoisting."""


def _inner_knobs(vt_options: tuple[int, ...]) -> list[tuple[str, str, int, bool]]:
    """The non-tile knobs in the order the search tries them (one thread has no axis to choose: "oh" only)."""
    return [(order, axis, vt, hoist) for (order, axis), vt, hoist in product(_INNER, vt_options, (False, True))
            if not (vt == 1 and axis == "oc")]


def _tile_grid(s: ConvShape) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every (tile_oc, tile_ic, tile_oh, tile_ow) in the search's order, as four int64 columns."""
    grid = np.meshgrid(*(np.array(candidates(n), np.int64) for n in (s.ocb, s.icb, s.oh, s.ow)), indexing="ij")
    return tuple(g.reshape(-1, 1) for g in grid)  # type: ignore[return-value]


def _fits(hw: _Hw, s: ConvShape, t_oc, t_ic, t_oh, t_ow, vt, copies_w) -> np.ndarray:
    """`conv_terms`' buffer bounds on arrays of knobs.  Every bound grows with `vt` and `copies_w`, so tiles
    that do not fit with the fewest threads and one weight copy fit with none: the search drops them first."""
    rows = (t_oh - 1) * s.stride + s.kh
    cols = (t_ow - 1) * s.stride + s.kw
    inp_tile = t_ic * (t_oh if s.kh == 1 and s.stride > 1 else rows) * cols
    acc_tile = t_oc * t_oh * t_ow
    kernel = t_oc * t_ic * s.kh * s.kw
    moved = s.residual and not hw.acc8_load
    res_inp, ident = (acc_tile, 1) if moved else (0, 0)
    res_acc = acc_tile if s.residual and hw.acc8_load else 0
    bias_wgt, ones = (t_oc * vt, 1) if s.bias_wgt else (0, 0)
    return (((inp_tile + res_inp) * vt + ones <= hw.inp_depth) & (kernel * copies_w + ident + bias_wgt <= hw.wgt_depth)
            & ((acc_tile + t_oc * s.vectors + res_acc) * vt <= hw.acc_depth) & (kernel * 2 * vt <= hw.uop_depth)
            & (t_oh * t_ow <= 16383) & (cols <= 65535) & (kernel <= 16383))


def _search_costs(hw: _Hw, s: ConvShape, fit: CostFit, tiles: tuple[np.ndarray, ...],
                  inner: list[tuple[str, str, int, bool]]) -> np.ndarray:
    """`conv_terms(...).cycles` of every (tile row, inner knobs) pair, +inf where it does not fit: the same
    operations in the same order as `conv_terms`, so each cost is the same double, vectorised."""
    t_oc, t_ic, t_oh, t_ow = tiles
    order_oc = np.array([k[0] == "oc" for k in inner])[None, :]
    axis_oc = np.array([k[1] == "oc" for k in inner])[None, :]
    vt = np.array([k[2] for k in inner], np.int64)[None, :]
    hoist = np.array([k[3] for k in inner])[None, :]
    n_oc, n_oh, n_ow, n_ic = ceil_div(s.ocb, t_oc), ceil_div(s.oh, t_oh), ceil_div(s.ow, t_ow), ceil_div(s.icb, t_ic)
    copies_w = np.where(hoist & ~axis_oc & order_oc, 1, vt)
    ok = (~((vt > 1) & (np.where(axis_oc, n_oc, n_oh) < vt)) & ~(hoist & (n_ic > 1))
          & _fits(hw, s, t_oc, t_ic, t_oh, t_ow, vt, copies_w))
    rows = (t_oh - 1) * s.stride + s.kh
    cols = (t_ow - 1) * s.stride + s.kw
    acc_tile = t_oc * t_oh * t_ow
    kernel = t_oc * t_ic * s.kh * s.kw
    tiles_n = s.nb * n_oc * n_oh * n_ow
    steps = tiles_n * n_ic
    data_rows = t_ic * np.minimum(t_oh if s.kh == 1 and s.stride > 1 else rows, s.h)
    inp_cycles = data_rows * hw.row(np.minimum(cols, s.w) * hw.eb_inp)
    wgt_step = t_oc * hw.row(t_ic * s.kh * s.kw * hw.eb_wgt)
    hoisted = s.nb * n_oc * np.where(order_oc, 1, n_oh * n_ow)
    hoisted = np.where(axis_oc | ~order_oc, np.maximum(hoisted, s.nb * n_oc), hoisted)
    weight_loads = np.where(hoist, hoisted, steps)
    out_runs = t_oc * np.where(t_ow == s.ow, 1, t_oh)
    run_cycles = out_runs * hw.row(acc_tile // out_runs * hw.eb_out)
    store_cycles = run_cycles * s.planes
    res_cycles = run_cycles if s.residual else 0
    bias_cycles = hw.row(t_oc * hw.eb_wgt) if s.bias_wgt else 0
    port = steps * inp_cycles + weight_loads * wgt_step + tiles_n * (store_cycles + res_cycles + bias_cycles)
    per_step = t_oh * t_ow * kernel + _INSN_OVERHEAD
    tile_ops = tiles_n * (acc_tile * (1 + s.epilogue_ops + s.operand_steps + (s.planes - 1))
                          + _INSN_OVERHEAD * (2 + s.epilogue_ops))
    compute = steps * per_step + tile_ops + (hw.row(kernel * 2 * 4) + 1)
    first = inp_cycles + wgt_step
    spread = np.maximum(vt - 1, 1) ** 2      # (vt - 1) ** 2 where threads overlap; unused for one thread
    surplus = np.maximum(0.0, inp_cycles + np.where(hoist, 0, wgt_step) - per_step)
    overlapped = (np.maximum(compute + fit.imbalance * steps * surplus, port) + first + store_cycles
                  + 0.02 * np.minimum(compute, port) + fit.tile_stall * tiles_n * (inp_cycles + wgt_step) / spread)
    if s.residual and not hw.acc8_load:
        overlapped = overlapped + fit.residual_stall * tiles_n * res_cycles / spread
    serial = compute + steps * inp_cycles + weight_loads * wgt_step + store_cycles + tiles_n * res_cycles
    return np.where(ok, np.where(vt > 1, overlapped, serial), np.inf)


def candidate_costs(cfg: HwConfig, s: ConvShape, vthreads: int | None = None,
                    fit: CostFit = FIT) -> tuple[list[ConvKnobs], np.ndarray]:
    """Every knob combination the search considers, in its order, with `conv_cost` of each (+inf: does not
    fit), computed at once: what `default_conv_knobs` minimises, unpruned (for tests and tools)."""
    inner = _inner_knobs((vthreads,) if vthreads else fit.vthreads)
    tiles = _tile_grid(s)
    costs = _search_costs(_hw(cfg), s, fit, tiles, inner)
    knobs = [ConvKnobs(int(oc), int(oh), int(ow), int(ic), *k)
             for oc, ic, oh, ow in zip(*(t.ravel() for t in tiles)) for k in inner]
    return knobs, costs.ravel()


@lru_cache(maxsize=1024)
def default_conv_knobs(cfg: HwConfig, s: ConvShape, vthreads: int | None = None, fit: CostFit = FIT) -> ConvKnobs:
    """The knobs with the lowest estimated cycles (the first in the search's order among equals); CompileError
    if nothing fits.  Tiles that fit with no thread count are dropped by the closed-form buffer bounds, the
    rest scored at once with numpy (`_search_costs`).  Cached per (config, shape): identical layers share one
    search, and the reduction packing (`packing.py`) scores a shape before the compiler compiles it."""
    vt_options = (vthreads,) if vthreads else fit.vthreads
    hw = _hw(cfg)
    tiles = _tile_grid(s)
    keep = _fits(hw, s, *tiles, min(vt_options), 1).ravel()
    tiles = tuple(t[keep] for t in tiles)
    inner = _inner_knobs(vt_options)
    costs = _search_costs(hw, s, fit, tiles, inner).ravel() if keep.any() else np.full(1, np.inf)
    best = int(np.argmin(costs))
    if costs[best] == np.inf:
        most = max(s.ocb, s.oh)
        if vthreads and vthreads > most:
            raise CompileError(f"{vthreads} virtual threads need as many tiles, but this convolution has "
                               f"at most {most} (output-channel blocks or rows)", op="conv2d")
        raise CompileError(f"no tiling of this convolution fits the buffers of config {cfg.label}",
                           op="conv2d")
    row, col = divmod(best, len(inner))
    t_oc, t_ic, t_oh, t_ow = (int(t[row, 0]) for t in tiles)
    return ConvKnobs(t_oc, t_oh, t_ow, t_ic, *inner[col])


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
