"""softmax over one axis (ONNX opset 13), float32, numerically stable.

The tensor is viewed as (outer, length, inner).  When the axis is the last one
(inner == 1) each row is reduced with contiguous loops; otherwise the running
max and sum are kept per inner position in scratch rows, so the innermost loop
still walks contiguous memory.  exp is the call-free polynomial from irgen,
which keeps every loop vectorisable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.cpu import buffers

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.cpu.irgen import F32, KernelBuilder, pointer
from vtakit.compiler.backends.cpu.jit import KernelKey, cached_plan, get_kernel
from vtakit.errors import pc_side_missing

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)

OP = "softmax"
_REDUCE = ("reassoc", "nsz", "contract")


@dataclass(frozen=True)
class SoftmaxKernel:
    outer: int
    length: int
    inner: int


def _emit_rows(kb: KernelBuilder, spec: SoftmaxKernel) -> None:
    b = kb.b
    with kb.loop(spec.outer, name="row") as row:
        base = kb.idx((row, spec.length))
        peak = kb.var(F32, ir.Constant(F32, float("-inf")))
        with kb.loop(spec.length, name="i") as i:
            kb.set(peak, kb.fmax(kb.get(peak), kb.load(kb["x"], kb.idx(base, i), F32)))
        top = kb.get(peak)
        total = kb.var(F32, ir.Constant(F32, 0.0))
        with kb.loop(spec.length, name="i") as i:
            value = kb.exp(b.fsub(kb.load(kb["x"], kb.idx(base, i), F32), top))
            kb.store(value, kb["y"], kb.idx(base, i))
            kb.set(total, b.fadd(kb.get(total), value, flags=_REDUCE))
        scale = b.fdiv(ir.Constant(F32, 1.0), kb.get(total))
        with kb.loop(spec.length, name="i") as i:
            at = kb.idx(base, i)
            kb.store(b.fmul(kb.load(kb["y"], at, F32), scale), kb["y"], at)


def _emit_columns(kb: KernelBuilder, spec: SoftmaxKernel) -> None:
    b = kb.b
    peak, total = kb["scratch"], kb["scratch2"]
    with kb.loop(spec.outer, name="o") as outer:
        base = kb.idx((outer, spec.length * spec.inner))
        with kb.loop(spec.inner, name="j") as j:
            kb.store(kb.load(kb["x"], kb.idx(base, j), F32), peak, j)
            kb.store(ir.Constant(F32, 0.0), total, j)
        with kb.loop(spec.length, start=1, name="l") as step, kb.loop(spec.inner, name="j") as j:
            value = kb.load(kb["x"], kb.idx(base, (step, spec.inner), j), F32)
            kb.store(kb.fmax(kb.load(peak, j, F32), value), peak, j)
        with kb.loop(spec.length, name="l") as step, kb.loop(spec.inner, name="j") as j:
            at = kb.idx(base, (step, spec.inner), j)
            value = kb.exp(b.fsub(kb.load(kb["x"], at, F32), kb.load(peak, j, F32)))
            kb.store(value, kb["y"], at)
            kb.store(b.fadd(kb.load(total, j, F32), value), total, j)
        with kb.loop(spec.inner, name="j") as j:
            kb.store(b.fdiv(ir.Constant(F32, 1.0), kb.load(total, j, F32)), total, j)
        with kb.loop(spec.length, name="l") as step, kb.loop(spec.inner, name="j") as j:
            at = kb.idx(base, (step, spec.inner), j)
            kb.store(b.fmul(kb.load(kb["y"], at, F32), kb.load(total, j, F32)), kb["y"], at)


def _build(spec: SoftmaxKernel):
    kb = KernelBuilder(OP, ["x", "y", "scratch", "scratch2"])
    if spec.inner == 1:
        _emit_rows(kb, spec)
    else:
        _emit_columns(kb, spec)
    return kb.finish()


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along `axis` (ONNX Softmax-13), float32."""
    x = checks.array(x, "x", OP, [checks.FLOAT32])
    axis = checks.reduction_axis(x, axis, OP)
    kernel, inner = cached_plan((OP, x.shape, axis), lambda: _plan(x.shape, axis % x.ndim))
    y = buffers.empty(x.shape, x.dtype)
    peak = buffers.empty(inner, np.float32)
    total = buffers.empty(inner, np.float32)
    kernel(pointer(x), pointer(y), pointer(peak), pointer(total))
    return y


def _plan(shape: tuple[int, ...], axis: int):
    spec = SoftmaxKernel(math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
    return get_kernel(KernelKey(OP, (spec,)), lambda: _build(spec), OP), spec.inner
