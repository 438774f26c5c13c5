"""dense (fully connected): y[n, o] = sum_k x[n, k] * w[o, k] + bias[o].

Both operands are contiguous along K, so the kernel is a block of dot
products: `batch_rows x out_rows` vector accumulators run along K together,
each x and w vector loaded once per step and reused across the block, and a
horizontal sum per output at the end.  The weights are read in place (a
transpose to feed the GEMM tile would cost as much as the product for batch 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.cpu import buffers

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Requant
from vtakit.compiler.backends.cpu.irgen import requantise
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32, KernelBuilder, pointer, vec
from vtakit.compiler.backends.cpu.jit import KernelKey, cached_plan, get_kernel, host_target
from vtakit.compiler.backends.host.matmul import DENSE as OP, dense_operands
from vtakit.errors import pc_side_missing

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)

@dataclass(frozen=True)
class DenseKernel:
    batch: int
    inputs: int       # K
    outputs: int      # O
    integer: bool
    has_bias: bool
    requant: Requant | None
    lanes: int
    block: tuple[int, int]  # (batch rows, output rows) per register block


def _emit_block(kb: KernelBuilder, spec: DenseKernel, n0: ir.Value, o0: ir.Value, rows: int, outs: int) -> None:
    b = kb.b
    lanes = spec.lanes
    acc_ty = I32 if spec.integer else F32
    load_ty = vec(I8 if spec.integer else F32, lanes)
    acc_vty = vec(acc_ty, lanes)
    k = spec.inputs
    full = k // lanes * lanes
    x_rows = [kb.idx((n0, k), (r * k)) for r in range(rows)]
    w_rows = [kb.idx((o0, k), (q * k)) for q in range(outs)]
    acc = [[kb.var(acc_vty, ir.Constant(acc_vty, None)) for _ in range(outs)] for _ in range(rows)]

    def step(at, mask) -> None:
        def fetch(base, index):
            value = kb.vload(base, index, load_ty) if mask is None else kb.masked_vload(base, index, load_ty, mask)
            return b.sext(value, acc_vty) if spec.integer else value
        xs = [fetch(kb["x"], kb.idx(row, at)) for row in x_rows]
        ws = [fetch(kb["w"], kb.idx(row, at)) for row in w_rows]
        for r in range(rows):
            for q in range(outs):
                if spec.integer:
                    kb.set(acc[r][q], b.add(b.mul(xs[r], ws[q]), kb.get(acc[r][q])))
                else:
                    kb.set(acc[r][q], kb.fma(xs[r], ws[q], kb.get(acc[r][q])))

    if full:
        with kb.loop(full, step=lanes, name="k") as at:
            step(at, None)
    if k > full:
        step(kb.i64(full), kb.lane_mask(lanes, k - full))
    for r in range(rows):
        for q in range(outs):
            out = kb.idx(o0, q)
            total = kb.reduce_add(kb.get(acc[r][q]))
            if spec.has_bias:
                bias = kb.load(kb["bias"], out, acc_ty)
                total = b.add(total, bias) if spec.integer else b.fadd(total, bias)
            if spec.requant is not None:
                total = requantise(kb, total, spec.requant)
            kb.store(total, kb["y"], kb.idx((n0, spec.outputs), (r * spec.outputs), out))


def _build_dense(spec: DenseKernel):
    kb = KernelBuilder("dense", ["x", "w", "bias", "y"])
    block_rows, block_outs = spec.block
    full_rows = spec.batch // block_rows * block_rows
    full_outs = spec.outputs // block_outs * block_outs

    def over_outputs(n0: ir.Value, rows: int) -> None:
        if full_outs:
            with kb.loop(full_outs, step=block_outs, name="o") as o0:
                _emit_block(kb, spec, n0, o0, rows, block_outs)
        if spec.outputs > full_outs:
            _emit_block(kb, spec, n0, kb.i64(full_outs), rows, spec.outputs - full_outs)

    if full_rows:
        with kb.loop(full_rows, step=block_rows, name="n") as n0:
            over_outputs(n0, block_rows)
    if spec.batch > full_rows:
        over_outputs(kb.i64(full_rows), spec.batch - full_rows)
    return kb.finish()


def dense(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, shift: int | None = None,
          clip: tuple[int, int] | None = None) -> np.ndarray:
    """x (N, K) @ w (O, K).T + bias; float32, or int8 with int32 / shifted-and-clipped int8 out."""
    x, w, bias, integer = dense_operands(x, w, bias)
    signature = (OP, x.shape, w.shape, integer, bias is not None, checks.frozen(shift), checks.frozen(clip))
    kernel, out_dtype = cached_plan(signature, lambda: _plan(x.shape, w.shape[0], integer, bias is not None,
                                                             shift, clip))
    y = buffers.empty((x.shape[0], w.shape[0]), out_dtype)
    kernel(pointer(x), pointer(w), pointer(bias if bias is not None else y), pointer(y))
    return y


def _plan(x_shape: tuple[int, int], outputs: int, integer: bool, has_bias: bool, shift, clip):
    requant = checks.int8_requant(shift, clip, integer, "dense", OP)
    host = host_target()
    block = (min(x_shape[0], 4), 4) if host.vector_registers >= 32 else (min(x_shape[0], 2), 4)
    spec = DenseKernel(x_shape[0], x_shape[1], outputs, integer, has_bias, requant, host.lanes(32), block)
    out_dtype = checks.result_dtype(integer, requant)
    return get_kernel(KernelKey(OP, (spec,)), lambda: _build_dense(spec), OP), out_dtype
