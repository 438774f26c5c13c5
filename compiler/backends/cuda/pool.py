"""Pooling on the GPU: max/average with one thread per output, global average with one block per plane.

Window validation, output sizes, the kernel's spec (`host.pool.PoolSpec`), average
divisors (a per-position table, as ONNX counts them) and the int8 rounding (half up,
through double precision) are the CPU backend's, so int8 results match it bit for bit.
Window elements outside the input are skipped, which equals the CPU's filling
of padding with -inf / -128 (max) or 0 (sums).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32
from vtakit.compiler.backends.cpu.irgen import F64, round_half_up_div
from vtakit.compiler.backends.host.pool import PoolSpec, avg_pool_spec, max_pool_spec
from vtakit.compiler.backends.cuda.call import Call
from vtakit.compiler.backends.cuda.device_array import GpuBackend, operand
from vtakit.compiler.backends.cuda.kernel import GpuKernelBuilder, Launch, grid_1d, make_kernel
from vtakit.compiler.backends.cuda.reduce import block_reduce, reduction_threads


def _emit_pool(kb: GpuKernelBuilder, spec: PoolSpec) -> None:
    b = kb.b
    n, c, h, w = spec.shape
    out_h, out_w = spec.out
    x_ty = I8 if spec.integer else F32
    if spec.kind == "max":
        work_ty = x_ty
        acc0 = ir.Constant(x_ty, -128 if spec.integer else float("-inf"))
        combine = kb.smax if spec.integer else kb.fmax
    else:
        work_ty = I32 if spec.integer else F32
        acc0 = ir.Constant(work_ty, 0)
        combine = b.add if spec.integer else b.fadd
    with kb.grid_stride(n * c * out_h * out_w) as item:
        ow = b.urem(item, kb.i64(out_w))
        rest = b.udiv(item, kb.i64(out_w))
        oh = b.urem(rest, kb.i64(out_h))
        plane = b.udiv(rest, kb.i64(out_h))
        x_plane = kb.idx((plane, h * w))
        row0 = kb.idx((oh, spec.stride[0]), -spec.pads[0])
        col0 = kb.idx((ow, spec.stride[1]), -spec.pads[1])
        acc = acc0
        for kh in range(spec.kernel[0]):
            ih = kb.idx(row0, kh * spec.dilation[0])
            row_inside = b.icmp_unsigned("<", ih, kb.i64(h))
            for kw in range(spec.kernel[1]):
                iw = kb.idx(col0, kw * spec.dilation[1])
                inside = b.and_(row_inside, b.icmp_unsigned("<", iw, kb.i64(w)))
                value = kb.load(kb["x"], kb.select_index(inside, kb.idx(x_plane, (ih, w), iw)), x_ty)
                if work_ty != x_ty:
                    value = b.sext(value, work_ty)
                acc = b.select(inside, combine(acc, value), acc)
        position = kb.idx((oh, out_w), ow)
        if spec.kind == "avg":
            if spec.integer:
                acc = round_half_up_div(kb, acc, kb.load(kb["divisors"], position, F64))
                acc = b.trunc(kb.clamp_int(acc, -128, 127), I8)
            else:
                acc = b.fdiv(acc, kb.load(kb["divisors"], position, F32))
        kb.store(acc, kb["y"], item)


def _pool(call: Call, spec: PoolSpec, x, divisors: np.ndarray | None):
    outputs = spec.shape[0] * spec.shape[1] * spec.out[0] * spec.out[1]
    kernel = make_kernel(f"{spec.kind}_pool2d", spec, grid_1d(outputs), ["x", "y", "divisors"], [], _emit_pool)
    y = call.empty((*spec.shape[:2], *spec.out), x.dtype)
    table = call.device(divisors) if divisors is not None else y
    call.launch(kernel, call.device(x), y, table)
    return call.result(y)


def max_pool2d(x, *, kernel, stride, pads, dilation=(1, 1), ceil_mode: bool = False, gpu: GpuBackend | None = None):
    """ONNX MaxPool on NCHW float32 or int8; pads (top, left, bottom, right) never win."""
    op = "max_pool2d"
    x = operand(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    spec = max_pool_spec(x, op, kernel, stride, pads, dilation, ceil_mode)
    return _pool(Call(op, [x], gpu), spec, x, None)


def avg_pool2d(x, *, kernel, stride, pads, count_include_pad: bool = False, ceil_mode: bool = False,
               gpu: GpuBackend | None = None):
    """ONNX AveragePool on NCHW float32; int8 rounds the mean half up and clips to int8."""
    op = "avg_pool2d"
    x = operand(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    spec, divisors = avg_pool_spec(x, op, kernel, stride, pads, count_include_pad, ceil_mode)
    return _pool(Call(op, [x], gpu), spec, x, divisors)


@dataclass(frozen=True)
class GlobalPoolSpec:
    planes: int
    size: int
    integer: bool
    threads: int


def _emit_global(kb: GpuKernelBuilder, spec: GlobalPoolSpec) -> None:
    b = kb.b
    acc_ty = I32 if spec.integer else F32
    plane = kb.block("x")
    base = kb.idx((plane, spec.size))
    total = kb.var(acc_ty, ir.Constant(acc_ty, 0))
    with kb.loop(spec.size, start=kb.thread("x"), step=spec.threads, name="i") as i:
        value = kb.load(kb["x"], kb.idx(base, i), I8 if spec.integer else F32)
        kb.set(total, b.add(kb.get(total), b.sext(value, I32)) if spec.integer else b.fadd(kb.get(total), value))
    scratch = kb.shared_array(acc_ty, spec.threads, "partial_sums")
    combine = b.add if spec.integer else b.fadd
    whole = block_reduce(kb, kb.get(total), combine, scratch, spec.threads)
    with kb.if_then(b.icmp_unsigned("==", kb.thread("x"), kb.i64(0))):
        if spec.integer:
            mean = round_half_up_div(kb, whole, ir.Constant(F64, 2.0 * spec.size))
            mean = b.trunc(kb.clamp_int(mean, -128, 127), I8)
        else:
            mean = b.fdiv(whole, ir.Constant(F32, float(spec.size)))
        kb.store(mean, kb["y"], plane)


def global_avg_pool(x, *, gpu: GpuBackend | None = None):
    """NCHW -> NC11 mean; int8 rounds half up (as avg_pool2d with c = H*W)."""
    op = "global_avg_pool"
    x = operand(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    n, c, h, w = x.shape
    threads = reduction_threads(h * w)
    spec = GlobalPoolSpec(n * c, h * w, x.dtype == checks.INT8, threads)
    kernel = make_kernel(op, spec, Launch((n * c, 1, 1), (threads, 1, 1)), ["x", "y"], [], _emit_global)
    call = Call(op, [x], gpu)
    y = call.empty((n, c, 1, 1), x.dtype)
    call.launch(kernel, call.device(x), y)
    return call.result(y)
