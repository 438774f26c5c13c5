"""Operators as users call them: numpy in, numpy out, run on a device.

    y, report = vtakit.ops.conv2d(x, w, stride=1, padding=1, bias=b, shift=8, clip=(0, 127),
                                  config=cfg, device="sim")

`x` is int8 NCHW, `w` int8 OIHW, `bias` int32; the result is int8 when a shift or
clip requantizes it, else the full int32 convolution.  `device` is "fsim"
(functional simulator), "sim" (cycle simulator) or any Device.  `schedule` may
be ConvKnobs / EltwiseKnobs (or their dict), or a raw Schedule; the default
comes from `heuristics`.  Every compile-time problem is a CompileError naming
the operator.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import lru_cache
from itertools import product
from typing import Any

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.codegen import CompiledOp, lower
from vtakit.compiler.backends.vta.depthwise import compile_depthwise, pack_depthwise_weight
from vtakit.compiler.backends.vta.eltwise_ops import add, compile_eltwise, max_pool2d, relu, requantize  # noqa: F401
from vtakit.compiler.backends.vta.op_checks import OpReport, check_array, check_vthreads, knobs_of, op_config, op_report, requant_args
from vtakit.compiler.backends.vta.lowering import bias_fits, pack_bias_weight
from vtakit.compiler.backends.vta.dispatch import conv2d_key, lookup as tuned
from vtakit.compiler.backends.vta.heuristics import ConvShape, candidates, conv_shape, conv_terms, default_conv_knobs
from vtakit.compiler.backends.vta.lowering.pool import after_pool, anchor_tap, halo_rows, pool_schedule_reason, pooled_rows, rows_in_place
from vtakit.compiler.backends.vta.packing import KINDS as PACKINGS, ConvGeometry, ReductionPacking, choose_packing, cost_window, packing as make_packing, with_bias_lanes
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_bias, pack_weight, resolve_device, run_compiled, unpack_activation
from vtakit.compiler.backends.vta.schedule import Schedule, apply
from vtakit.compiler.backends.vta.te import ComputeDef, Padding, PoolWindow, conv2d_def, split_channel_shift
from vtakit.compiler.backends.vta.templates import ConvKnobs, conv_schedule
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp, MemId


# -------------------------------------------------------------- convolution
def _check_conv_args(name: str, x_shape, w_shape, stride, padding) -> None:
    if w_shape[1] != x_shape[1]:
        raise CompileError(f"weights expect {w_shape[1]} input channels, data has {x_shape[1]}", op=name)
    pads = (padding,) if isinstance(padding, int) else tuple(padding) if isinstance(padding, (tuple, list)) else ()
    if not isinstance(stride, int) or stride < 1 or len(pads) not in (1, 4) \
            or not all(isinstance(p, (int, np.integer)) and p >= 0 for p in pads):
        raise CompileError(f"stride must be >= 1 and padding >= 0 (one value or top, left, bottom, right), "
                           f"got {stride}, {padding}", op=name)


def compile_conv2d(cfg: HwConfig, *, x_shape, w_shape, stride: int = 1, padding: Padding = 0, bias: bool = False,
                   shift: int | None = None, clip: tuple[int, int] | None = None, schedule=None,
                   vthreads: int | None = None, residual: tuple[int, tuple[int, int]] | None = None,
                   channel_shift: bool = False, bias_gemm: bool = False, pool: tuple[int, int, int] | None = None,
                   multiplier: bool = False, pre_shift: int = 0, name: str = "conv2d") -> tuple[CompiledOp, Any]:
    """Compile a convolution; returns the relocatable program and the schedule used.

    `pool` = (kernel, stride, pad): a max pool fused after the epilogue (lowering/pool.py), stored pooled;
    its schedule keeps whole rows per tile (`pool_conv_knobs`; a tuning log's knobs, a dict, that
    split the rows give way to it, ConvKnobs given here are checked by the lowering).

    `residual` = (shift, clip): a residual add fused into the epilogue (te.conv2d_def); its schedule is
    the one tuned for the plain convolution when that still fits, else the heuristic's.  With
    `channel_shift` the program also reads a per-channel `shift` vector (`te.split_channel_shift`); with
    `bias_gemm` its `bias` is WGT digit blocks (`lowering.pack_bias_weight`) added by a GEMM; with
    `multiplier` a per-channel `mult` vector after a `pre_shift` (quant/techniques/fixed_point.py, ALU MUL)."""
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape
    check_vthreads(name, vthreads)
    shift, clip = requant_args(name, shift, clip)
    _check_conv_args(name, x_shape, w_shape, stride, padding)
    if residual is not None:
        residual = requant_args(name, residual[0], residual[1]) + tuple(residual[2:3])
    window = PoolWindow(*pool) if pool is not None else None
    compute = conv2d_def(cfg, n=n, c_in=c, h=h, w=w, c_out=o, kh=kh, kw=kw, stride=stride, pad=padding,
                         bias=bias, shift=shift, clip=clip, residual=residual, channel_shift=channel_shift,
                         bias_gemm=bias and bias_gemm, pool=window, multiplier=multiplier, pre_shift=pre_shift,
                         name=name)
    ch, cw, cpad, key_pad = cost_window(h, w, padding)
    shape = conv_shape(cfg, n=n, c_in=c, h=ch, w=cw, c_out=o, kh=kh, kw=kw, stride=stride, pad=cpad,
                       epilogue_ops=len(compute.steps), planes=compute.out_planes, residual=residual is not None,
                       vectors=(0 if bias and bias_gemm else 1) + channel_shift + multiplier,
                       bias_wgt=bias and bias_gemm,
                       operand_steps=sum(s.operand is not None and s.operand.tensor.mem == MemId.ACC
                                         for s in compute.steps))
    if window is not None and isinstance(schedule, dict) and ("tile_oh" not in schedule or "tile_ow" not in schedule
                                                              or pool_schedule_reason(compute, schedule["tile_oh"],
                                                                                      schedule["tile_ow"])):
        schedule = None  # a tuning log's tiles (tuned for the plain conv) that cannot carry the pool
    if window is not None and schedule is None:
        schedule = pool_conv_knobs(cfg, shape, compute, vthreads)
    if schedule is None and vthreads is None:
        plain = conv2d_def(cfg, n=n, c_in=c, h=h, w=w, c_out=o, kh=kh, kw=kw, stride=stride, pad=padding,
                           bias=bias, shift=shift, clip=clip, channel_shift=channel_shift, multiplier=multiplier,
                           pre_shift=pre_shift, name=name) if residual is not None else compute
        key = conv2d_key(x_shape=x_shape, w_shape=w_shape, stride=stride, padding=key_pad,
                         epilogue=tuple(step.op.name + ("V" if step.op in (AluOp.SHR, AluOp.MUL)
                                                        and step.operand is not None else "")
                                        for step in plain.steps))
        schedule = tuned(key, cfg)
        if schedule is not None and (residual is not None or channel_shift or bias_gemm or multiplier) \
                and conv_terms(cfg, shape, ConvKnobs(**schedule)) is None:
            schedule = None  # the tuned tiles leave no room for the residual tile or the shift vector
    schedule = knobs_of(schedule, ConvKnobs)
    if schedule is None:
        schedule = default_conv_knobs(cfg, shape, vthreads)
    sched = conv_schedule(schedule, bias=bias, residual=residual is not None, channel_shift=channel_shift,
                          bias_gemm=bias and bias_gemm, interleave=window is not None, multiplier=multiplier) \
        if isinstance(schedule, ConvKnobs) else schedule
    if not isinstance(sched, Schedule):
        raise CompileError(f"schedule must be ConvKnobs, a dict of them or a Schedule, got "
                           f"{type(schedule).__name__}", op=name)
    return lower(apply(compute, sched), cfg, name), schedule


@lru_cache(maxsize=64)
def pool_conv_knobs(cfg: HwConfig, s: ConvShape, compute: ComputeDef, vthreads: int | None = None) -> ConvKnobs:
    """The cheapest convolution knobs by heuristics' cost model (the pool's ALU work and the epilogue's
    tail on the pooled tile counted as epilogue passes over the tile) that keep whole rows per tile
    and leave acc room for the pool's buffers (lowering/pool.py); threads over rows then take
    alternate tiles (`conv_schedule(interleave)`)."""
    p = compute.pool
    pw, ph = p.out_size(s.ow), p.out_size(s.oh)
    anchor = anchor_tap(p, s.ow) is not None
    tail = len(compute.steps) - after_pool(compute.steps)
    # ALU cycles per pooled entry (2 per tensor-operand micro-op): the row taps, the reset and taps of
    # the pooled rows, the tail; as passes over the conv tile's entries
    per_pooled = 2 * p.kernel * (p.kernel if not anchor else p.kernel - 1) / max(1, p.stride) + 1 + 2 * p.kernel \
        + 1.5 * tail
    passes = per_pooled * ph * pw / (s.oh * s.ow) - tail
    shape = replace(s, epilogue_ops=max(0, round(s.epilogue_ops + passes)))
    best: tuple[float, ConvKnobs] | None = None
    for t_oc, t_ic, t_oh in product(candidates(s.ocb), candidates(s.icb), candidates(s.oh)):
        if pool_schedule_reason(compute, t_oh, s.ow):
            continue
        starts = list(range(0, s.oh, t_oh))
        halo = halo_rows(p, s.oh, starts)
        out_rows = max(len(pooled_rows(p, s.oh, a, min(a + t_oh, s.oh))) for a in starts)
        in_place = rows_in_place(p, s.oh, s.ow, [(a, min(a + t_oh, s.oh)) for a in starts])
        extra = 0 if in_place else t_oc * out_rows * pw  # per thread
        shared = s.nb * s.ocb * halo * pw + (0 if anchor else t_oc * t_oh * pw)
        for order, axis, vt, hoist in product(("oc", "sp"), ("oh", "oc"), [vthreads] if vthreads else [2, 1],
                                              (False, True)):
            k = ConvKnobs(t_oc, t_oh, s.ow, t_ic, order, axis, vt, hoist)
            terms = conv_terms(cfg, shape, k)
            if terms is None:
                continue
            res = terms.acc_tile if s.residual and cfg.acc8_load else 0
            acc = (terms.acc_tile + t_oc * s.vectors + res + extra) * vt + shared
            if acc <= cfg.acc_depth and (best is None or terms.cycles < best[0]):
                best = (terms.cycles, k)
    if best is None:
        raise CompileError(f"no tiling of this convolution leaves room for the fused max pool on config "
                           f"{cfg.label}", op=compute.name)
    return best[1]


def fused_pool_reason(cfg: HwConfig, *, x_shape, w_shape, stride: int, padding: Padding, pool: tuple[int, int, int],
                      residual: bool = False, channel_shift: bool = False, multiplier: bool = False,
                      name: str = "conv2d") -> str | None:
    """Why a max pool cannot join this convolution's task on `cfg` (None if it can): the graph's
    fusion pass asks before fusing, so such a pool stays its own task."""
    n, c, h, w = x_shape
    try:
        compute = conv2d_def(cfg, n=n, c_in=c, h=h, w=w, c_out=w_shape[0], kh=w_shape[2], kw=w_shape[3],
                             stride=stride, pad=padding, shift=0, clip=(-128, 127), channel_shift=channel_shift,
                             pool=PoolWindow(*pool), multiplier=multiplier, name=name)
        ch, cw, cpad, _ = cost_window(h, w, padding)
        shape = conv_shape(cfg, n=n, c_in=c, h=ch, w=cw, c_out=w_shape[0], kh=w_shape[2], kw=w_shape[3], stride=stride,
                           pad=cpad, epilogue_ops=len(compute.steps) + 2 * residual, planes=1,
                           residual=residual, vectors=1 + channel_shift + multiplier)
        pool_conv_knobs(cfg, shape, compute)
    except CompileError as e:
        return str(e)
    return None


def conv_packing(cfg: HwConfig, *, x_shape, w_shape, stride: int, padding: int, bias: np.ndarray | None,
                 shift: int | None, clip: tuple[int, int] | None, kind: str | None = None,
                 name: str = "conv2d") -> ReductionPacking:
    """The reduction packing of a convolution: `kind` if given, else the cost model's choice; a
    packed form carries the bias in idle lanes where it fits (`packing.with_bias_lanes`)."""
    _check_conv_args(name, x_shape, w_shape, stride, padding)
    n, c, h, wd = x_shape
    o, _, kh, kw = w_shape
    shift, clip = requant_args(name, shift, clip)
    compute = conv2d_def(cfg, n=n, c_in=c, h=h, w=wd, c_out=o, kh=kh, kw=kw, stride=stride, pad=padding,
                         bias=bias is not None, shift=shift, clip=clip, name=name)     # checks the window fits
    g = ConvGeometry(tuple(x_shape), tuple(w_shape), stride, padding)
    if kind is not None:
        if kind not in PACKINGS:
            raise CompileError(f"packing must be one of {', '.join(PACKINGS)}, got {kind!r}", op=name)
        return with_bias_lanes(cfg, make_packing(kind, g), bias)
    return choose_packing(cfg, g, epilogue_ops=len(compute.steps), planes=compute.out_planes, bias=bias)


def _bias_scope(schedule) -> str | None:
    """Where a raw Schedule caches the bias ("acc": an ALU ADD, "wgt": the GEMM of lowering/bias.py); None for
    knobs, whose schedule the compiler writes."""
    if not isinstance(schedule, Schedule):
        return None
    return next((step[2] for step in schedule.steps if step[0] == "cache_read" and step[1] == "bias"), None)


def conv2d(x: np.ndarray, w: np.ndarray, *, stride: int = 1, padding: int = 0, bias: np.ndarray | None = None,
           shift: int | np.ndarray | None = None, clip: tuple[int, int] | None = None, config=None, device="sim",
           schedule=None, vthreads: int | None = None, timeout_s: float | None = None,
           packing: str | None = None, pool: tuple[int, int, int] | None = None,
           multiplier: np.ndarray | None = None, pre_shift: int = 0,
           name: str = "conv2d") -> tuple[np.ndarray, OpReport]:
    """`packing` ("none", "im2col", "space_to_depth"; default: the cost model's choice when no
    schedule is given, else "none") rewrites the convolution on the host (`packing.py`).  `pool` =
    (kernel, stride, pad) max-pools the int8 result on chip before the store (the result is pooled).
    `multiplier` (int32, one per output channel; configs with ALU MUL): the epilogue is
    ((acc + bias) >> pre_shift) * multiplier[c] >> shift[c], then the clip (quant/techniques/fixed_point.py)."""
    cfg = op_config(config)
    check_array("x", name, x, np.int8, 4)
    check_array("w", name, w, np.int8, 4)
    if bias is not None:
        check_array("bias", name, bias, np.int32, 1)
        if len(bias) != w.shape[0]:
            raise CompileError(f"bias has {len(bias)} entries for {w.shape[0]} output channels", op=name)
    shift_vector = None
    if isinstance(shift, (np.ndarray, list, tuple)):  # per output channel: a common part and a vector
        if len(shift) != w.shape[0]:
            raise CompileError(f"shift has {len(shift)} entries for {w.shape[0]} output channels", op=name)
        shift, shift_vector = split_channel_shift(cfg, shift, name)
    if multiplier is not None:
        check_array("multiplier", name, multiplier, np.int32, 1)
        if len(multiplier) != w.shape[0]:
            raise CompileError(f"multiplier has {len(multiplier)} entries for {w.shape[0]} output channels", op=name)
    t0 = time.perf_counter()
    pk = conv_packing(cfg, x_shape=x.shape, w_shape=w.shape, stride=stride, padding=padding,
                      bias=bias, shift=shift, clip=clip, name=name,
                      kind=packing if packing is not None or schedule is None else "none")
    g = pk.packed
    bias_gemm = not pk.bias_lanes and bias_fits(cfg, bias) and _bias_scope(schedule) in (None, "wgt")
    op, used = compile_conv2d(cfg, x_shape=g.x_shape, w_shape=g.w_shape, stride=g.stride, padding=g.padding,
                              bias=bias is not None and not pk.bias_lanes, shift=shift, clip=clip,
                              schedule=schedule, vthreads=vthreads, channel_shift=shift_vector is not None,
                              bias_gemm=bias_gemm, pool=pool, multiplier=multiplier is not None,
                              pre_shift=pre_shift, name=name)
    t1 = time.perf_counter()
    inputs = {"data": pack_activation(pk.input(x), cfg.batch, cfg.block_in),
              "weight": pack_weight(pk.weight(w, bias), cfg.block_out, cfg.block_in)}
    if bias is not None and not pk.bias_lanes:
        inputs["bias"] = pack_bias_weight(bias, cfg) if bias_gemm else pack_bias(bias, cfg.batch, cfg.block_out)
    if shift_vector is not None:
        inputs["shift"] = pack_bias(shift_vector, cfg.batch, cfg.block_out)
    if multiplier is not None:
        inputs["mult"] = pack_bias(multiplier, cfg.batch, cfg.block_out)
    out, stats = run_compiled(op, resolve_device(device, cfg), inputs, timeout_s)
    t2 = time.perf_counter()
    y = unpack_activation(out, x.shape[0], w.shape[0])
    n, c, _, _ = x.shape
    oh, ow = op.compute.out.tensor.shape[2:]   # the convolution's output (before a fused pool)
    macs = n * w.shape[0] * oh * ow * c * w.shape[2] * w.shape[3]
    report = op_report(name, op, stats, macs, t1 - t0, t2 - t1, used)
    report.packing = pk.label
    return y, report


def depthwise_conv2d(x: np.ndarray, w: np.ndarray, *, stride: int = 1, padding: int | tuple = 0,
                     bias: np.ndarray | None = None, shift: int | np.ndarray | None = None,
                     clip: tuple[int, int] | None = None, config=None, device="sim", schedule=None,
                     timeout_s: float | None = None, name: str = "depthwise") -> tuple[np.ndarray, OpReport]:
    """Depthwise convolution (w int8 (C, 1, KH, KW)) as a block-diagonal GEMM (`depthwise.py`);
    `padding` one value or (top, left, bottom, right)."""
    cfg = op_config(config)
    check_array("x", name, x, np.int8, 4)
    check_array("w", name, w, np.int8, 4)
    if w.shape[:2] != (x.shape[1], 1):
        raise CompileError(f"depthwise weights must be ({x.shape[1]}, 1, KH, KW) for {x.shape[1]} channels, "
                           f"got {w.shape}", op=name)
    pads = (padding,) * 4 if isinstance(padding, (int, np.integer)) else tuple(padding)
    shift_vector = None
    if isinstance(shift, (np.ndarray, list, tuple)):
        if len(shift) != w.shape[0]:
            raise CompileError(f"shift has {len(shift)} entries for {w.shape[0]} channels", op=name)
        shift, shift_vector = split_channel_shift(cfg, shift, name)
    shift, clip = requant_args(name, shift, clip)
    if bias is not None:
        check_array("bias", name, bias, np.int32, 1)
    bias_gemm = bias_fits(cfg, bias)   # the bias added by GEMM where it fits the lanes (lowering/bias.py)
    t0 = time.perf_counter()
    op, used = compile_depthwise(cfg, x_shape=x.shape, kernel=w.shape[2:], stride=stride, pads=pads,
                                 bias=bias is not None, shift=shift, clip=clip, channel_shift=shift_vector is not None,
                                 bias_gemm=bias_gemm, schedule=schedule, name=name)
    t1 = time.perf_counter()
    inputs = {"data": pack_activation(x, cfg.batch, cfg.block_in), "weight": pack_depthwise_weight(w, cfg.block_out)}
    if bias is not None:
        inputs["bias"] = pack_bias_weight(bias, cfg) if bias_gemm else pack_bias(bias, cfg.batch, cfg.block_out)
    if shift_vector is not None:
        inputs["shift"] = pack_bias(shift_vector, cfg.batch, cfg.block_out)
    out, stats = run_compiled(op, resolve_device(device, cfg), inputs, timeout_s)
    t2 = time.perf_counter()
    y = unpack_activation(out, x.shape[0], x.shape[1])
    macs = int(np.prod(y.shape)) * w.shape[2] * w.shape[3]
    return y, op_report(name, op, stats, macs, t1 - t0, t2 - t1, used)


def dense(x: np.ndarray, w: np.ndarray, *, bias: np.ndarray | None = None, shift: int | np.ndarray | None = None,
          clip: tuple[int, int] | None = None, config=None, device="sim", schedule=None,
          vthreads: int | None = None, timeout_s: float | None = None,
          name: str = "dense") -> tuple[np.ndarray, OpReport]:
    """y = x @ w.T (+ bias), x int8 (N, C), w int8 (O, C): a 1x1 convolution over a 1 x N image of the rows
    (`runtime.act_nchw`), so the weights are loaded once per output tile for all N rows."""
    check_array("x", name, x, np.int8, 2)
    check_array("w", name, w, np.int8, 2)
    if x.shape[1] != w.shape[1]:
        raise CompileError(f"x has {x.shape[1]} features, w expects {w.shape[1]}", op=name)
    y, report = conv2d(np.ascontiguousarray(x.T[None, :, None, :]), w[:, :, None, None], bias=bias, shift=shift,
                       clip=clip, config=config, device=device, schedule=schedule, vthreads=vthreads,
                       timeout_s=timeout_s, name=name)
    return np.ascontiguousarray(y[0, :, 0, :].T), report


matmul = dense
