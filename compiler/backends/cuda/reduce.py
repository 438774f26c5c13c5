"""Block-wide reductions in shared memory, and softmax with one block per row.

A row's elements are strided over the block's threads (thread t takes t, t+T,
...), each thread reduces its share in registers, then a shared-memory tree
(T/2, T/4, ..., 1 active threads, a barrier after each step) combines the
partials.  Softmax makes three passes over its row: the maximum, the sum of
exp(x - max) (writing the exponentials), and the scaling by 1 / sum; its exp is
the CPU backend's call-free polynomial, so results differ from the CPU only by
summation order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.cpu.irgen import F32
from vtakit.compiler.backends.cuda.call import Call
from vtakit.compiler.backends.cuda.device_array import GpuBackend, operand
from vtakit.compiler.backends.cuda.kernel import GpuKernelBuilder, Launch, make_kernel

OP = "softmax"


def reduction_threads(length: int) -> int:
    """Threads per block for reducing `length` elements: a power of two from 32 (a warp) to 256."""
    return min(256, max(32, 1 << (max(length, 1) - 1).bit_length()))


def block_reduce(kb: GpuKernelBuilder, value: ir.Value, combine: Callable[[ir.Value, ir.Value], ir.Value],
                 scratch: ir.Value, threads: int) -> ir.Value:
    """combine() of every thread's `value`, returned to all threads (`scratch` holds `threads` elements)."""
    b = kb.b
    thread = kb.thread("x")
    kb.store(value, scratch, thread)
    kb.barrier()
    step = threads // 2
    while step:
        with kb.if_then(b.icmp_unsigned("<", thread, kb.i64(step))):
            mine = kb.load(scratch, thread, value.type)
            kb.store(combine(mine, kb.load(scratch, kb.idx(thread, step), value.type)), scratch, thread)
        kb.barrier()
        step //= 2
    result = kb.load(scratch, 0, value.type)
    kb.barrier()  # everyone has read the result before the scratch is reused
    return result


@dataclass(frozen=True)
class SoftmaxSpec:
    outer: int
    length: int
    inner: int
    threads: int


def _emit_softmax(kb: GpuKernelBuilder, spec: SoftmaxSpec) -> None:
    b = kb.b
    row = kb.block("x")
    base = kb.idx((b.udiv(row, kb.i64(spec.inner)), spec.length * spec.inner), b.urem(row, kb.i64(spec.inner)))
    scratch = kb.shared_array(F32, spec.threads, "partials")

    def elements():
        return kb.loop(spec.length, start=kb.thread("x"), step=spec.threads, name="i")

    peak = kb.var(F32, ir.Constant(F32, float("-inf")))
    with elements() as i:
        kb.set(peak, kb.fmax(kb.get(peak), kb.load(kb["x"], kb.idx(base, (i, spec.inner)), F32)))
    top = block_reduce(kb, kb.get(peak), kb.fmax, scratch, spec.threads)
    total = kb.var(F32, ir.Constant(F32, 0.0))
    with elements() as i:
        at = kb.idx(base, (i, spec.inner))
        value = kb.exp(b.fsub(kb.load(kb["x"], at, F32), top))
        kb.store(value, kb["y"], at)
        kb.set(total, b.fadd(kb.get(total), value))
    scale = b.fdiv(ir.Constant(F32, 1.0), block_reduce(kb, kb.get(total), b.fadd, scratch, spec.threads))
    with elements() as i:
        at = kb.idx(base, (i, spec.inner))
        kb.store(b.fmul(kb.load(kb["y"], at, F32), scale), kb["y"], at)


def softmax(x, axis: int = -1, *, gpu: GpuBackend | None = None):
    """exp(x - max) / sum(exp(x - max)) along `axis` (ONNX Softmax-13), float32."""
    x = operand(x, "x", OP, [checks.FLOAT32])
    axis = checks.reduction_axis(x, axis, OP) % x.ndim
    outer, length, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    spec = SoftmaxSpec(outer, length, inner, reduction_threads(length))
    kernel = make_kernel(OP, spec, Launch((outer * inner, 1, 1), (spec.threads, 1, 1)), ["x", "y"], [],
                         _emit_softmax)
    call = Call(OP, [x], gpu)
    y = call.empty(x.shape, np.float32)
    call.launch(kernel, call.device(x), y)
    return call.result(y)
