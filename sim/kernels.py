"""Vectorised GEMM and ALU micro-op loops.

A GEMM or ALU instruction runs `iter_out x iter_in x (uop_end - uop_bgn)`
micro-ops in that loop order.  The semantics are strictly sequential (ISA.md:
no hazard rule is left to the compiler); these kernels reach the same result
with a few numpy operations per instruction:

* GEMM only reads the input and weight buffers and accumulates into acc, and
  wrapping addition is associative, so the order of accumulation does not
  matter: products are computed as float matrix products (exact: every dot
  product is far below 2**24 for int8).  Convolution-shaped streams (found once
  per instruction shape, `plans.py`) are one product per block of output-channel
  groups added into the destinations in place; others are grouped by weight entry,
  then scatter-added.
* ALU reads and writes the same buffer.  When no micro-op reads an entry that an
  earlier micro-op of the same instruction wrote, and no entry is written twice,
  one gather-compute-scatter is exact.  Repeated destinations with an
  associative operation (ADD/MIN/MAX/MUL) use `ufunc.at`.  Anything else is
  split into hazard-free chunks executed in order.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np

from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp
from vtakit.sim.plans import IM2COL_MIN_UOPS, conv_blocks

if TYPE_CHECKING:
    from vtakit.sim.plans import AluChunk, ConvBlock, ResetPlan

_GROUPED_MIN_ROWS = 8
_CHUNK = 4096


try:  # optional: scikit-learn's dependency, present in the dev install
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover - without it BLAS keeps its own thread count
    ThreadpoolController = None
_blas: "ThreadpoolController | None" = None


def one_blas_thread() -> contextlib.AbstractContextManager:
    """BLAS on one thread while a simulation runs (when threadpoolctl is there).

    The products here are small (hundreds of rows, at most a few hundred columns): a
    second BLAS thread gains little on an idle machine, and on a busy one every product
    waits for it (ResNet-18 on the cycle model, 2 cores under load: 3.2 s with two BLAS
    threads, 1.4 s with one).  Only the thread count changes, never a result."""
    global _blas
    if ThreadpoolController is None:
        return contextlib.nullcontext()
    if _blas is None:
        _blas = ThreadpoolController()  # after numpy has loaded its BLAS
    return _blas.limit(limits=1, user_api="blas")


class GemmKernel:
    """Products and accumulation for one configuration's GEMM core."""

    def __init__(self, cfg: HwConfig):
        bound = cfg.block_in * (1 << (cfg.inp_bits - 1)) * (1 << (cfg.wgt_bits - 1))
        self.float_dtype = np.dtype(np.float32 if bound <= 1 << 24 else np.float64)
        self._direct_cast = bound < 1 << (cfg.acc_bits - 1)
        self.acc_dtype = cfg.acc_dtype
        self._term_bound = (1 << (cfg.inp_bits - 1)) * (1 << (cfg.wgt_bits - 1))
        self._acc_bits = cfg.acc_bits

    def accumulate(self, acc: np.ndarray, inp_f: np.ndarray, wgt_f: np.ndarray,
                   dst: np.ndarray, src: np.ndarray, wgt: np.ndarray,
                   blocks: "tuple[ConvBlock, ...] | None" = None) -> None:
        """acc[dst[n]] += inp[src[n]] @ wgt[wgt[n]].T for every n (wrapping).

        `blocks`: the stream's convolution pattern (plans.conv_blocks), found here when
        not given and the stream is long enough to pay for looking."""
        if blocks is None and dst.size >= IM2COL_MIN_UOPS:
            blocks = conv_blocks(dst, src, wgt)
        if blocks is not None and self.accumulate_blocks(acc, inp_f, wgt_f, blocks):
            return
        products, order = self._products(inp_f, wgt_f, src, wgt)
        if order is not None:
            dst = dst[order]
        lanes = acc.shape[1] * acc.shape[2]
        if self._direct_cast:
            vals = products.astype(self.acc_dtype)
        else:
            vals = products.astype(np.int64).astype(self.acc_dtype)
        scatter_add(acc.reshape(acc.shape[0], lanes), dst, vals.reshape(-1, lanes))

    def accumulate_blocks(self, acc: np.ndarray, inp_f: np.ndarray, wgt_f: np.ndarray,
                          blocks: "tuple[ConvBlock, ...]") -> bool:
        """The convolution case as matrix products, without a scatter.

        Per block: the gathered inputs (destinations x k*block_in) times the G groups'
        k stacked weight blocks side by side (k*block_in x G*block_out).  Exact while
        the longest dot product stays an integer the float type holds; returns False,
        having changed nothing, when that bound does not hold."""
        batch, c = inp_f.shape[1], inp_f.shape[2]
        o = wgt_f.shape[1]
        k = blocks[0].k
        bound = k * c * self._term_bound
        if bound > 1 << 53:
            return False
        ftype = np.float32 if bound <= 1 << 24 else np.float64
        wide = bound >= 1 << (self._acc_bits - 1)
        for b in blocks:
            p, g = b.pixels, b.wgt.shape[0]
            # np.take: the same gather as inp_f[b.src], about three times faster for these rows
            x = np.take(inp_f, b.src.astype(np.intp, copy=False), axis=0).reshape(p, k, batch, c).transpose(0, 2, 1, 3).reshape(p * batch, k * c)
            w = np.take(wgt_f, b.wgt.astype(np.intp, copy=False), axis=0).transpose(1, 3, 0, 2).reshape(k * c, g * o)
            out = np.matmul(x.astype(ftype, copy=False), w.astype(ftype, copy=False))
            vals = (out.astype(np.int64) if wide else out).astype(self.acc_dtype)
            vals = vals.reshape(p, batch, g, o).transpose(2, 0, 1, 3)
            if isinstance(b.heads, slice):
                target = acc[b.heads].reshape(g, p, batch, o)
                target += vals
            else:
                acc[b.heads] += vals.reshape(g * p, batch, o)
        return True

    def reset_outputs(self, acc: np.ndarray, inp_f: np.ndarray, wgt_f: np.ndarray, plan: "ResetPlan",
                      out_dtype: np.dtype) -> np.ndarray:
        """The values a reset GEMM leaves in VTA's output buffer at `plan.entries`.

        VTA's GEMM computes acc + inp x wgt^T and writes the sum's low bits to the
        output buffer even when reset zeroes the accumulator; a repeated destination
        reads the zero its earlier micro-op wrote, so only its last product counts.
        """
        if plan.single:  # typically a reset from one zero input row: one product for all
            products = np.matmul(inp_f[plan.src[0]], wgt_f[plan.wgt[0]].T)[None]
        else:
            products, order = self._products(inp_f, wgt_f, plan.src, plan.wgt)
            if order is not None:
                unsorted = np.empty_like(products)
                unsorted[order] = products
                products = unsorted
        old = acc[plan.entries].astype(np.int64)
        base = old if plan.once is None else np.where(plan.once, old, 0)
        total = base + products.astype(np.int64)
        return total.astype(self.acc_dtype).astype(out_dtype)

    def _products(self, inp_f, wgt_f, src, wgt):
        n = src.size
        batch, k = inp_f.shape[1], inp_f.shape[2]
        o = wgt_f.shape[1]
        counts = np.bincount(wgt.astype(np.intp, copy=False))
        used = np.flatnonzero(counts)
        if n >= _GROUPED_MIN_ROWS * used.size:
            # Few distinct weight entries: one dense matmul per entry.
            order = np.argsort(wgt, kind="stable")
            x = inp_f[src[order]].reshape(n * batch, k)
            out = np.empty((n * batch, o), dtype=self.float_dtype)
            ends = np.cumsum(counts[used]) * batch
            starts = ends - counts[used] * batch
            for v, s, e in zip(used.tolist(), starts.tolist(), ends.tolist()):
                np.matmul(x[s:e], wgt_f[v].T, out=out[s:e])
            return out.reshape(n, batch, o), order
        # Many distinct weight entries: batched small matmuls in chunks.
        out = np.empty((n, batch, o), dtype=self.float_dtype)
        for s in range(0, n, _CHUNK):
            e = min(n, s + _CHUNK)
            a = inp_f[src[s:e]]
            b = wgt_f[wgt[s:e]]
            np.matmul(a, b.transpose(0, 2, 1), out=out[s:e])
        return out, None


def scatter_add(acc2d: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    """acc2d[idx[n]] += vals[n], with repeated indices summed (wrapping)."""
    if idx.size == 0:
        return
    if np.bincount(idx.astype(np.intp, copy=False)).max() <= 1:
        acc2d[idx] += vals
    else:
        np.add.at(acc2d, idx, vals)


# --------------------------------------------------------------------- ALU
def alu_apply(op: int, x: np.ndarray, y, acc_dtype: np.dtype, shr_bits: int) -> np.ndarray:
    """op(x, y) lanewise with the accumulator's wrapping; y is an array or an int."""
    if op == AluOp.MIN:
        return np.minimum(x, y).astype(acc_dtype, copy=False)
    if op == AluOp.MAX:
        return np.maximum(x, y).astype(acc_dtype, copy=False)
    if op == AluOp.ADD:
        return (x.astype(np.int64) + y).astype(acc_dtype)
    if op == AluOp.MUL:
        return (x.astype(np.int64) * y).astype(acc_dtype)
    # SHR: the low shr_bits bits of y, read as signed, are the shift; negative shifts left.
    half, full = 1 << (shr_bits - 1), 1 << shr_bits
    if isinstance(y, int):  # an immediate: one shift, in one direction
        a = (y & (full - 1)) - (full if y & half else 0)
        x64 = x.astype(np.int64)
        return (x64 >> a if a >= 0 else x64 << -a).astype(acc_dtype)
    amount = np.bitwise_and(y, full - 1)
    amount = np.where(amount >= half, amount - full, amount)
    x64 = x.astype(np.int64)
    shifted = np.where(amount >= 0, x64 >> np.maximum(amount, 0), x64 << np.maximum(-amount, 0))
    return shifted.astype(acc_dtype)


_ASSOCIATIVE = {AluOp.ADD: np.add, AluOp.MIN: np.minimum, AluOp.MAX: np.maximum,
                AluOp.MUL: np.multiply}


def alu_run(acc2d: np.ndarray, op: int, chunk: "AluChunk", imm: int, shr_bits: int) -> None:
    """Sequential semantics of acc[dst[n]] = op(acc[dst[n]], imm or acc[src[n]]) for n in order."""
    n = chunk.n
    if n == 0:
        return
    dtype = acc2d.dtype
    dst, src = chunk.dst, chunk.src
    if not chunk.reads_earlier_write:
        if not chunk.repeated:
            operand = imm if src is None else acc2d[chunk.src_entries]
            acc2d[chunk.dst_entries] = alu_apply(op, acc2d[chunk.dst_entries], operand, dtype, shr_bits)
            return
        if op in _ASSOCIATIVE:
            if src is None:
                operand = np.full((n, acc2d.shape[1]), imm, dtype=np.int64).astype(dtype)
            else:
                operand = acc2d[src]
            _ASSOCIATIVE[AluOp(op)].at(acc2d, dst, operand)
            return
    for s, e in chunk.pieces:
        operand = imm if src is None else acc2d[src[s:e]]
        acc2d[dst[s:e]] = alu_apply(op, acc2d[dst[s:e]], operand, dtype, shr_bits)
