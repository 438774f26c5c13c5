"""Elementwise operators and max pooling as users call them (numpy in, numpy out; `vtakit.ops` exports
them beside the convolutions of `ops.py`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.codegen import CompiledOp, lower
from vtakit.compiler.backends.vta.heuristics import default_eltwise_knobs
from vtakit.compiler.backends.vta.op_checks import OpReport, check_array, check_vthreads, knobs_of, op_config, op_report, requant_args
from vtakit.compiler.backends.vta.runtime import pack_activation, resolve_device, run_compiled, unpack_activation
from vtakit.compiler.backends.vta.schedule import apply
from vtakit.compiler.backends.vta.te import eltwise_def, maxpool_def
from vtakit.compiler.backends.vta.templates import EltwiseKnobs, eltwise_schedule
from vtakit.isa.config import HwConfig


def compile_eltwise(cfg: HwConfig, kind: str, *, shape: tuple[int, int, int, int], inputs: tuple[str, ...],
                    shift=None, clip=None, multiplier=None, window=None, schedule=None, vthreads=None,
                    name: str | None = None) -> tuple[CompiledOp, Any]:
    """Compile an elementwise op or max pooling (`window` = (kernel, stride, pad)) on NCHW `shape`."""
    name = name or kind
    check_vthreads(name, vthreads)
    n, c, h, w = shape
    if window is None:
        compute = eltwise_def(cfg, kind, n=n, c=c, h=h, w=w, shift=shift, clip=clip, multiplier=multiplier,
                              name=name)
        oh, ow = h, w
    else:
        k, st, pad = window
        compute = maxpool_def(cfg, n=n, c=c, h=h, w=w, kernel=k, stride=st, pad=pad, name=name)
        oh, ow = compute.out.tensor.shape[2:]
    knobs = knobs_of(schedule, EltwiseKnobs)
    if knobs is None:
        nb, cb = compute.out.tensor.shape[:2]
        knobs = default_eltwise_knobs(cfg, nb=nb, cb=cb, h=oh, w=ow, tensors=len(inputs) + 1,
                                      window=window, vthreads=vthreads)
    sched = eltwise_schedule(knobs, inputs=inputs if window is None else ("data",),
                             pool=window is not None) if isinstance(knobs, EltwiseKnobs) else knobs
    return lower(apply(compute, sched), cfg, name), knobs


def _eltwise(kind: str, tensors: dict[str, np.ndarray], *, shift=None, clip=None, multiplier=None, config=None,
             device="sim", schedule=None, vthreads=None, timeout_s=None, window=None,
             name=None) -> tuple[np.ndarray, OpReport]:
    name = name or kind
    cfg = op_config(config)
    first = next(iter(tensors.values()))
    n, c = first.shape[:2]
    t0 = time.perf_counter()
    op, knobs = compile_eltwise(cfg, kind, shape=first.shape, inputs=tuple(tensors), shift=shift, clip=clip,
                                multiplier=multiplier, window=window, schedule=schedule, vthreads=vthreads,
                                name=name)
    t1 = time.perf_counter()
    packed = {k: pack_activation(v, cfg.batch, cfg.block_out) for k, v in tensors.items()}
    if window is not None:
        packed = {"data": next(iter(packed.values()))}
    out, stats = run_compiled(op, resolve_device(device, cfg), packed, timeout_s)
    t2 = time.perf_counter()
    y = unpack_activation(out, n, c)
    return y, op_report(name, op, stats, 0, t1 - t0, t2 - t1, knobs)


def add(a: np.ndarray, b: np.ndarray, *, shift: int | None = None, clip: tuple[int, int] | None = None,
        config=None, device="sim", schedule=None, vthreads=None, timeout_s=None,
        name: str = "add") -> tuple[np.ndarray, OpReport]:
    """Residual add of two int8 NCHW tensors, saturated to int8 (optionally >> shift first)."""
    check_array("a", name, a, np.int8, 4)
    check_array("b", name, b, np.int8, 4)
    if a.shape != b.shape:
        raise CompileError(f"shapes differ: {a.shape} and {b.shape}", op=name)
    shift, clip = requant_args(name, shift, clip if clip is not None else (-128, 127))
    return _eltwise("add", {"a": a, "b": b}, shift=shift, clip=clip, config=config, device=device,
                    schedule=schedule, vthreads=vthreads, timeout_s=timeout_s, name=name)


def relu(x: np.ndarray, *, config=None, device="sim", schedule=None, vthreads=None, timeout_s=None,
         name: str = "relu") -> tuple[np.ndarray, OpReport]:
    check_array("x", name, x, np.int8, 4)
    return _eltwise("relu", {"a": x}, config=config, device=device, schedule=schedule, vthreads=vthreads,
                    timeout_s=timeout_s, name=name)


def requantize(x: np.ndarray, *, shift: int, clip: tuple[int, int] = (-128, 127), multiplier: int | None = None,
               config=None, device="sim", schedule=None, vthreads=None, timeout_s=None,
               name: str = "requantize") -> tuple[np.ndarray, OpReport]:
    """int32 NCHW -> int8: ((x * multiplier) >> shift) clipped; the multiplier (16-bit, wrapping
    int32 product) needs a configuration whose ALU has MUL."""
    check_array("x", name, x, np.int32, 4)
    shift, clip = requant_args(name, shift, clip)
    return _eltwise("requantize", {"a": x}, shift=shift, clip=clip, multiplier=multiplier, config=config,
                    device=device,
                    schedule=schedule, vthreads=vthreads, timeout_s=timeout_s, name=name)


def max_pool2d(x: np.ndarray, *, kernel: int, stride: int | None = None, padding: int = 0, config=None,
               device="sim", schedule=None, vthreads=None, timeout_s=None,
               name: str = "max_pool2d") -> tuple[np.ndarray, OpReport]:
    """Max pooling of int8 NCHW with ALU MAX; padding never wins."""
    check_array("x", name, x, np.int8, 4)
    stride = kernel if stride is None else stride
    for what, v, low in (("kernel", kernel, 1), ("stride", stride, 1), ("padding", padding, 0)):
        if not isinstance(v, (int, np.integer)) or v < low:
            raise CompileError(f"{what} must be an integer >= {low}, got {v!r}", op=name)
    if padding >= kernel:
        raise CompileError(f"padding {padding} must be smaller than the window {kernel}", op=name)
    return _eltwise("max_pool2d", {"data": x}, config=config, device=device, schedule=schedule,
                    vthreads=vthreads, timeout_s=timeout_s, window=(kernel, stride, padding), name=name)
