"""max_pool2d, avg_pool2d and global_avg_pool (ONNX semantics; float32 and int8).

Windows that touch padding (or, with ceil_mode, run past it) read from a
scratch plane pre-filled with the value that cannot change the result (-inf or
-128 for max, 0 for sums), so the inner loop along output columns is
branch-free and vectorises.  Average divisors depend only on the position, so
they come in as a table computed once in Python.  int8 averages round half up:
floor((2 s + c) / (2 c)), computed in double precision, which is exact for
int32 operands and vectorises where integer division would not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.cpu import buffers
from vtakit.errors import pc_side_missing
from vtakit.compiler.backends.cpu.irgen import F32, F64, I8, I32, KernelBuilder, pointer, round_half_up_div
from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.pool import PoolSpec, avg_pool_spec, max_pool_spec
from vtakit.compiler.backends.cpu.jit import KernelKey, cached_plan, get_kernel

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)


def _build_pool(spec: PoolSpec):
    kb = KernelBuilder(f"{spec.kind}_pool2d", ["x", "y", "plane", "divisors"])
    b = kb.b
    n, c, h, w = spec.shape
    out_h, out_w = spec.out
    plane_h, plane_w = spec.plane
    x_ty = I8 if spec.integer else F32
    work_ty = x_ty if spec.kind == "max" else (I32 if spec.integer else F32)
    if spec.kind == "max":
        fill = ir.Constant(x_ty, -128 if spec.integer else float("-inf"))
        combine = kb.smax if spec.integer else kb.fmax
    else:
        fill = ir.Constant(work_ty, 0)
        combine = b.add if spec.integer else (lambda a, v: b.fadd(a, v))
    if spec.copies:
        with kb.loop(plane_h * plane_w, name="z") as z:
            kb.store(fill, kb["plane"], z)
    with kb.loop(n * c, name="nc") as plane_index:
        x_plane = kb.idx((plane_index, h * w))
        if spec.copies:
            source, base, source_ty, pitch = kb["plane"], kb.i64(0), work_ty, plane_w
            with kb.loop(h, name="ih") as ih, kb.loop(w, name="iw") as iw:
                value = kb.load(kb["x"], kb.idx(x_plane, (ih, w), iw), x_ty)
                value = b.sext(value, I32) if work_ty != x_ty else value
                kb.store(value, kb["plane"], kb.idx((ih, plane_w), spec.pads[0] * plane_w + spec.pads[1], iw))
        else:
            source, base, source_ty, pitch = kb["x"], x_plane, x_ty, w
        y_plane = kb.idx((plane_index, out_h * out_w))
        with kb.loop(out_h, name="oh") as oh:
            row0 = kb.idx(base, (oh, spec.stride[0] * pitch))
            with kb.loop(out_w, name="ow") as ow:
                column0 = kb.idx(row0, (ow, spec.stride[1]))
                acc = None
                for kh in range(spec.kernel[0]):
                    for kw in range(spec.kernel[1]):
                        at = kb.idx(column0, kh * spec.dilation[0] * pitch + kw * spec.dilation[1])
                        value = kb.load(source, at, source_ty)
                        if source_ty != work_ty:
                            value = b.sext(value, work_ty)
                        acc = value if acc is None else combine(acc, value)
                position = kb.idx((oh, out_w), ow)
                if spec.kind == "avg":
                    if spec.integer:
                        acc = round_half_up_div(kb, acc, kb.load(kb["divisors"], position, F64))
                        acc = b.trunc(kb.clamp_int(acc, -128, 127), I8)
                    else:
                        acc = b.fdiv(acc, kb.load(kb["divisors"], position, F32))
                kb.store(acc, kb["y"], kb.idx(y_plane, position))
    return kb.finish()


def _run(plan: tuple[object, PoolSpec, np.ndarray | None], x: np.ndarray) -> np.ndarray:
    kernel, spec, divisors = plan
    plane_dtype = np.int32 if spec.integer and spec.kind == "avg" else x.dtype
    plane = buffers.empty(spec.plane[0] * spec.plane[1] if spec.copies else 1, plane_dtype)
    y = buffers.empty((*spec.shape[:2], *spec.out), x.dtype)
    kernel(pointer(x), pointer(y), pointer(plane), pointer(x if divisors is None else divisors))
    return y


def _compile(spec: PoolSpec, divisors: np.ndarray | None):
    op = f"{spec.kind}_pool2d"
    return get_kernel(KernelKey("pool2d", (spec,)), lambda: _build_pool(spec), op), spec, divisors


def max_pool2d(x: np.ndarray, *, kernel, stride, pads, dilation=(1, 1), ceil_mode: bool = False) -> np.ndarray:
    """ONNX MaxPool on NCHW float32 or int8; pads (top, left, bottom, right) never win."""
    op = "max_pool2d"
    x = checks.array(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    frozen = checks.frozen

    def plan():
        return _compile(max_pool_spec(x, op, kernel, stride, pads, dilation, ceil_mode), None)

    signature = (op, x.shape, x.dtype.char, frozen(kernel), frozen(stride), frozen(pads), frozen(dilation),
                 frozen(ceil_mode))
    return _run(cached_plan(signature, plan), x)


def avg_pool2d(x: np.ndarray, *, kernel, stride, pads, count_include_pad: bool = False,
               ceil_mode: bool = False) -> np.ndarray:
    """ONNX AveragePool on NCHW float32; int8 rounds the mean half up and clips to int8."""
    op = "avg_pool2d"
    x = checks.array(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    frozen = checks.frozen

    def plan():
        return _compile(*avg_pool_spec(x, op, kernel, stride, pads, count_include_pad, ceil_mode))

    signature = (op, x.shape, x.dtype.char, frozen(kernel), frozen(stride), frozen(pads), frozen(count_include_pad),
                 frozen(ceil_mode))
    return _run(cached_plan(signature, plan), x)


@dataclass(frozen=True)
class GlobalPoolKernel:
    planes: int
    size: int
    integer: bool


def _build_global(spec: GlobalPoolKernel):
    kb = KernelBuilder("global_avg_pool", ["x", "y"])
    b = kb.b
    acc_ty = I32 if spec.integer else F32
    with kb.loop(spec.planes, name="plane") as plane:
        total = kb.var(acc_ty, ir.Constant(acc_ty, 0))
        with kb.loop(spec.size, name="i") as i:
            value = kb.load(kb["x"], kb.idx((plane, spec.size), i), I8 if spec.integer else F32)
            if spec.integer:
                kb.set(total, b.add(kb.get(total), b.sext(value, I32)))
            else:
                kb.set(total, b.fadd(kb.get(total), value, flags=("reassoc", "contract")))
        if spec.integer:
            mean = round_half_up_div(kb, kb.get(total), ir.Constant(F64, 2.0 * spec.size))
            mean = b.trunc(kb.clamp_int(mean, -128, 127), I8)
        else:
            mean = b.fdiv(kb.get(total), ir.Constant(F32, float(spec.size)))
        kb.store(mean, kb["y"], plane)
    return kb.finish()


def global_avg_pool(x: np.ndarray) -> np.ndarray:
    """NCHW -> NC11 mean; int8 rounds half up (as avg_pool2d with c = H*W)."""
    op = "global_avg_pool"
    x = checks.array(x, "x", op, [checks.FLOAT32, checks.INT8], ndim=4)
    n, c, h, w = x.shape
    spec = GlobalPoolKernel(n * c, h * w, x.dtype == checks.INT8)
    kernel = cached_plan((op, x.shape, x.dtype.char),
                         lambda: get_kernel(KernelKey(op, (spec,)), lambda: _build_global(spec), op))
    y = buffers.empty((n, c, 1, 1), x.dtype)
    kernel(pointer(x), pointer(y))
    return y
