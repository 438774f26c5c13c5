"""Vectorised GEMM and ALU micro-op loops.

A GEMM or ALU instruction runs `iter_out x iter_in x (uop_end - uop_bgn)`
micro-ops in that loop order.  The semantics are strictly sequential (ISA.md:
no hazard rule is left to the compiler); these kernels reach the same result
with a few numpy operations per instruction:

* GEMM only reads the input and weight buffers and accumulates into acc, and
  wrapping addition is associative, so the order of accumulation does not
  matter: products are computed as float matrix products (exact: every dot
  product is far below 2**24 for int8) grouped by weight entry, then
  scatter-added.
* ALU reads and writes the same buffer.  When no micro-op reads an entry that an
  earlier micro-op of the same instruction wrote, and no entry is written twice,
  one gather-compute-scatter is exact.  Repeated destinations with an
  associative operation (ADD/MIN/MAX/MUL) use `ufunc.at`.  Anything else is
  split into hazard-free chunks executed in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp

_GROUPED_MIN_ROWS = 8
_CHUNK = 4096
_CHUNK_UOPS = 1 << 18
_IM2COL_MIN_UOPS = 64


def loop_indices(base: np.ndarray, it_out: int, it_in: int, f_out: int, f_in: int) -> np.ndarray:
    """Flat buffer indices in execution order (outer, inner, micro-op)."""
    if it_out == 1 and it_in == 1:
        return base
    outer = (np.arange(it_out, dtype=np.int64) * f_out)[:, None, None]
    inner = (np.arange(it_in, dtype=np.int64) * f_in)[None, :, None]
    return (base[None, None, :] + outer + inner).reshape(-1)


def loop_chunks(it_out: int, it_in: int, n_uops: int, limit: int | None = None):
    """Split a loop nest, in execution order, into (outer start, outer count, inner
    start, inner count) pieces of at most `limit` micro-ops (fewer for huge loops
    only when one micro-op range exceeds it), so memory stays bounded."""
    limit = limit or _CHUNK_UOPS
    per_outer = it_in * n_uops
    if it_out * per_outer <= limit:
        yield 0, it_out, 0, it_in
    elif per_outer <= limit:
        step = limit // per_outer
        for o0 in range(0, it_out, step):
            yield o0, min(step, it_out - o0), 0, it_in
    else:
        step = max(1, limit // n_uops)
        for o in range(it_out):
            for i0 in range(0, it_in, step):
                yield o, 1, i0, min(step, it_in - i0)


def loop_max(base: np.ndarray, it_out: int, it_in: int, f_out: int, f_in: int) -> int:
    """Largest index the loop touches (factors are unsigned)."""
    return int(base.max()) + (it_out - 1) * f_out + (it_in - 1) * f_in


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
                   dst: np.ndarray, src: np.ndarray, wgt: np.ndarray) -> None:
        """acc[dst[n]] += inp[src[n]] @ wgt[wgt[n]].T for every n (wrapping)."""
        if dst.size >= _IM2COL_MIN_UOPS and self._accumulate_im2col(acc, inp_f, wgt_f, dst, src, wgt):
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

    def _accumulate_im2col(self, acc: np.ndarray, inp_f: np.ndarray, wgt_f: np.ndarray,
                           dst: np.ndarray, src: np.ndarray, wgt: np.ndarray) -> bool:
        """The convolution case, without a scatter.

        When every destination receives k micro-ops and destinations that start with
        the same weight entry receive the same sequence of k weight entries (one group
        per output-channel block), each group is one matrix product of the gathered
        inputs (destinations x k*block_in) with its k stacked weight blocks.  Exact
        while the longest dot product stays an integer the float type holds.  Returns
        False, having changed nothing, when the pattern or that bound does not hold.
        """
        # As emitted, else sorted by (destination, weight entry): the sums commute.
        plan = _conv_pattern(dst, wgt, slice(None)) or _conv_pattern(dst, wgt, np.lexsort((wgt, dst)))
        if plan is None:
            return False
        order, k, heads, w = plan.order, plan.k, plan.heads, plan.wgt
        batch, c = inp_f.shape[1], inp_f.shape[2]
        o = wgt_f.shape[1]
        bound = k * c * self._term_bound
        if bound > 1 << 53:
            return False
        ftype = np.float32 if bound <= 1 << 24 else np.float64
        x = inp_f[src[order]].reshape(-1, k, batch, c).transpose(0, 2, 1, 3).reshape(-1, batch, k * c)
        for start, size in zip(plan.starts.tolist(), plan.sizes.tolist()):
            members = plan.by_first[start:start + size]
            wmat = wgt_f[w[members[0]]].transpose(0, 2, 1).reshape(k * c, o)
            out = np.matmul(x[members].reshape(-1, k * c).astype(ftype, copy=False), wmat.astype(ftype, copy=False))
            if bound < 1 << (self._acc_bits - 1):
                vals = out.astype(self.acc_dtype)
            else:
                vals = out.astype(np.int64).astype(self.acc_dtype)
            acc[heads[members]] += vals.reshape(-1, batch, o)
        return True

    def reset_outputs(self, acc: np.ndarray, inp_f: np.ndarray, wgt_f: np.ndarray, dst: np.ndarray,
                      src: np.ndarray, wgt: np.ndarray, out_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """(entries, values) a reset GEMM leaves in VTA's output buffer.

        VTA's GEMM computes acc + inp x wgt^T and writes the sum's low bits to the
        output buffer even when reset zeroes the accumulator; a repeated destination
        reads the zero its earlier micro-op wrote, so only its last product counts.
        """
        products, order = self._products(inp_f, wgt_f, src, wgt)
        if order is not None:
            unsorted = np.empty_like(products)
            unsorted[order] = products
            products = unsorted
        n = dst.size
        entries, first_from_end = np.unique(dst[::-1], return_index=True)
        last = n - 1 - first_from_end
        once = (np.bincount(dst)[entries] == 1)[:, None, None]
        base = np.where(once, acc[entries].astype(np.int64), 0)
        total = base + products[last].astype(np.int64)
        return entries, total.astype(self.acc_dtype).astype(out_dtype)

    def _products(self, inp_f, wgt_f, src, wgt):
        n = src.size
        batch, k = inp_f.shape[1], inp_f.shape[2]
        o = wgt_f.shape[1]
        counts = np.bincount(wgt)
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


@dataclass(frozen=True)
class _ConvPattern:
    order: "slice | np.ndarray"  # brings each destination's micro-ops together
    k: int                       # micro-ops per destination
    heads: np.ndarray            # the destinations, one per run
    wgt: np.ndarray              # (destinations, k) weight entries
    by_first: np.ndarray         # destinations ordered by their first weight entry
    starts: np.ndarray           # where each weight group starts in by_first
    sizes: np.ndarray


def _conv_pattern(dst: np.ndarray, wgt: np.ndarray, order) -> _ConvPattern | None:
    """The convolution pattern of a GEMM's micro-ops in `order`, or None: runs of k
    micro-ops per destination, every destination once, and destinations that start with
    the same weight entry using the same k weight entries.  The compiler's usual order
    (every tap of one pixel, then the next pixel) has it as emitted."""
    d = dst[order]
    changes = d[1:] != d[:-1]
    k = int(np.argmax(changes)) + 1 if changes.any() else d.size
    if d.size % k:
        return None
    rows = d.reshape(-1, k)
    if not (rows == rows[:, :1]).all():
        return None
    heads = rows[:, 0]
    if np.unique(heads).size != heads.size:
        return None
    w = wgt[order].reshape(-1, k)
    by_first = np.argsort(w[:, 0], kind="stable")
    firsts = w[by_first, 0]
    starts = np.flatnonzero(np.r_[True, firsts[1:] != firsts[:-1]])
    sizes = np.diff(np.r_[starts, firsts.size])
    if not (w[by_first] == np.repeat(w[by_first[starts]], sizes, axis=0)).all():
        return None
    return _ConvPattern(order, k, heads, w, by_first, starts, sizes)


def scatter_add(acc2d: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    """acc2d[idx[n]] += vals[n], with repeated indices summed (wrapping)."""
    if idx.size == 0:
        return
    if np.bincount(idx).max() <= 1:
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
    amount = np.bitwise_and(y, full - 1)
    amount = np.where(amount >= half, amount - full, amount)
    x64 = x.astype(np.int64)
    shifted = np.where(amount >= 0, x64 >> np.maximum(amount, 0), x64 << np.maximum(-amount, 0))
    return shifted.astype(acc_dtype)


_ASSOCIATIVE = {AluOp.ADD: np.add, AluOp.MIN: np.minimum, AluOp.MAX: np.maximum,
                AluOp.MUL: np.multiply}


def alu_run(acc2d: np.ndarray, op: int, dst: np.ndarray, src: np.ndarray | None, imm: int,
            shr_bits: int) -> None:
    """Sequential semantics of acc[dst[n]] = op(acc[dst[n]], imm or acc[src[n]]) for n in order."""
    n = dst.size
    if n == 0:
        return
    depth = acc2d.shape[0]
    dtype = acc2d.dtype
    repeated = np.bincount(dst, minlength=depth).max() > 1
    reads_earlier_write = False
    if src is not None:
        first_write = np.full(depth, n, dtype=np.int64)
        np.minimum.at(first_write, dst, np.arange(n, dtype=np.int64))
        reads_earlier_write = bool(np.any(first_write[src] < np.arange(n)))
    if not reads_earlier_write:
        operand = imm if src is None else acc2d[src]
        if not repeated:
            acc2d[dst] = alu_apply(op, acc2d[dst], operand, dtype, shr_bits)
            return
        if op in _ASSOCIATIVE:
            if src is None:
                operand = np.full((n, acc2d.shape[1]), imm, dtype=np.int64).astype(dtype)
            _ASSOCIATIVE[AluOp(op)].at(acc2d, dst, operand)
            return
    for s, e in _hazard_free_chunks(dst, src):
        operand = imm if src is None else acc2d[src[s:e]]
        acc2d[dst[s:e]] = alu_apply(op, acc2d[dst[s:e]], operand, dtype, shr_bits)


def _hazard_free_chunks(dst: np.ndarray, src: np.ndarray | None):
    """Maximal runs in which no entry is written twice or read after being written."""
    written: set[int] = set()
    start = 0
    srcs = src.tolist() if src is not None else None
    for k, d in enumerate(dst.tolist()):
        if d in written or (srcs is not None and srcs[k] in written):
            yield start, k
            written.clear()
            start = k
        written.add(d)
    yield start, dst.size
