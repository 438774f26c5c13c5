"""Index plans of GEMM and ALU instructions, computed once per instruction shape.

What a GEMM or ALU instruction does to the buffers' *indices* (the flat entries its
micro-ops touch, the convolution pattern of a GEMM, the hazards of an ALU) depends
only on its micro-op range's contents and its loop fields, never on the data.  A
compiled network repeats a few dozen shapes thousands of times (one per tile), so
`PlanCache` keys each plan by exactly those contents and fields: a hit is the same
computation on the same indices, and an instruction whose micro-ops or loop differ
in any entry gets its own plan.  The data-dependent work (gathers, products,
accumulation) stays in `kernels.py` and runs every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

IM2COL_MIN_UOPS = 64
_CHUNK_UOPS = 1 << 18
_PLAN_MAX_UOPS = 1 << 20
"""Loops with more micro-ops are planned chunk by chunk as they run (memory stays bounded)."""
_CACHE_ENTRIES = 1 << 22
"""Index entries kept over all cached plans (8 bytes each) before the cache starts afresh."""


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


def hazard_free_chunks(dst: np.ndarray, src: np.ndarray | None):
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


def as_entries(idx: np.ndarray) -> "slice | np.ndarray":
    """A slice when the indices are consecutive and increasing (in-place numpy, no gather)."""
    if idx.size and int(idx[-1]) - int(idx[0]) == idx.size - 1 and (idx.size == 1 or (np.diff(idx) == 1).all()):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


@dataclass(frozen=True)
class ConvBlock:
    """G output-channel groups over the same P destinations' inputs: one matrix product.

    Destination `heads[g * P + p]` receives sum over taps t of inp[src[p * k + t]] x
    wgt[wgt[g, t]]^T; the heads are distinct."""

    pixels: int
    k: int
    src: np.ndarray          # (P * k,) input entries, tap-minor
    wgt: np.ndarray          # (G, k) weight entries
    heads: "slice | np.ndarray"  # G * P destination entries, group-major


def conv_blocks(dst: np.ndarray, src: np.ndarray, wgt: np.ndarray) -> tuple[ConvBlock, ...] | None:
    """The convolution pattern of a GEMM's micro-ops as matrix-product blocks, or None.

    The pattern: runs of k micro-ops per destination, every destination once, and
    destinations that start with the same weight entry using the same k weight entries
    (a group; one per output-channel block).  Groups whose destinations read the same
    input rows in the same order share one block (one product with G stacked weight
    matrices); otherwise each group is its own block.  Accumulation commutes, so the
    micro-ops may be reordered by (destination, weight entry) to find the pattern."""
    for order in (slice(None), None):
        if order is None:
            order = np.lexsort((wgt, dst))
        found = _runs(dst[order], wgt[order])
        if found is not None:
            break
    else:
        return None
    k, heads, w, groups = found
    s = src[order].reshape(-1, k)
    first = groups[0]
    if all(m.size == first.size and np.array_equal(s[m], s[first]) for m in groups[1:]):
        gp = np.stack([heads[m] for m in groups])
        return (ConvBlock(first.size, k, s[first].reshape(-1), np.stack([w[m[0]] for m in groups]),
                          as_entries(gp.reshape(-1))),)
    return tuple(ConvBlock(m.size, k, s[m].reshape(-1), w[m[0]][None], as_entries(heads[m])) for m in groups)


def _runs(d: np.ndarray, w_flat: np.ndarray):
    """(k, heads, weight rows, groups of destination rows) or None (see conv_blocks)."""
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
    w = w_flat.reshape(-1, k)
    by_first = np.argsort(w[:, 0], kind="stable")
    firsts = w[by_first, 0]
    starts = np.flatnonzero(np.r_[True, firsts[1:] != firsts[:-1]])
    sizes = np.diff(np.r_[starts, firsts.size])
    if not (w[by_first] == np.repeat(w[by_first[starts]], sizes, axis=0)).all():
        return None
    groups = [by_first[a:a + n] for a, n in zip(starts.tolist(), sizes.tolist())]
    return k, heads, w, groups


@dataclass(frozen=True)
class ResetPlan:
    """What a reset GEMM leaves in VTA's output buffer: per distinct destination, its
    last micro-op's product, plus the old accumulator value where it is the only one."""

    entries: "slice | np.ndarray"  # distinct destinations, increasing
    src: np.ndarray          # the input entry of each one's last micro-op
    wgt: np.ndarray
    once: np.ndarray | None  # (entries, 1, 1) bool: written by a single micro-op; None: all are
    single: bool             # one input entry and one weight entry for all: one product


def reset_plan(dst: np.ndarray, src: np.ndarray, wgt: np.ndarray) -> ResetPlan:
    n = dst.size
    entries, first_from_end = np.unique(dst[::-1], return_index=True)
    last = n - 1 - first_from_end
    once = (np.bincount(dst.astype(np.intp, copy=False))[entries] == 1)[:, None, None]
    src, wgt = src[last], wgt[last]
    single = bool((src == src[0]).all() and (wgt == wgt[0]).all())
    return ResetPlan(as_entries(entries), src, wgt, None if once.all() else once, single)


@dataclass(frozen=True)
class GemmChunk:
    """One chunk of a GEMM's loop nest, in execution order."""

    n: int
    dst: np.ndarray
    src: np.ndarray
    wgt: np.ndarray
    touched: "slice | np.ndarray"          # the distinct destinations (the output buffer's copy)
    blocks: tuple[ConvBlock, ...] | None   # the matrix-product form, when the pattern holds
    reset: ResetPlan | None                # reset GEMMs on configurations with an output buffer


@dataclass(frozen=True)
class AluChunk:
    """One chunk of an ALU's loop nest with its hazards (see kernels.alu_run)."""

    n: int
    dst: np.ndarray
    src: np.ndarray | None
    repeated: bool                         # some entry is written twice
    reads_earlier_write: bool              # some micro-op reads an entry an earlier one wrote
    pieces: tuple[tuple[int, int], ...]    # hazard-free runs, in order
    touched: "slice | np.ndarray"          # the distinct destinations
    dst_entries: "slice | np.ndarray"      # dst, or the same entries as a slice
    src_entries: "slice | np.ndarray | None"


@dataclass(frozen=True)
class LoopPlan:
    """A GEMM or ALU instruction's indices: the largest entry per operand and the chunks."""

    tops: tuple[int, int, int]             # largest dst, src, wgt entry the loop touches
    chunks: "tuple | Iterator"             # a one-use iterator for loops too large to keep
    size: int                              # index entries held (the cache's budget)
    cacheable: bool = True


def _nest(base: np.ndarray, o0: int, n_out: int, i0: int, n_in: int, f_out: int, f_in: int) -> np.ndarray:
    return loop_indices(base + (o0 * f_out + i0 * f_in), n_out, n_in, f_out, f_in)


def gemm_plan(d0, s0, w0, it_out: int, it_in: int, dfo: int, dfi: int, sfo: int, sfi: int,
              wfo: int, wfi: int, reset: bool, out_buffer: bool) -> LoopPlan:
    tops = (loop_max(d0, it_out, it_in, dfo, dfi), loop_max(s0, it_out, it_in, sfo, sfi),
            loop_max(w0, it_out, it_in, wfo, wfi))

    def chunks():
        for o0, n_out, i0, n_in in loop_chunks(it_out, it_in, d0.size):
            dst = _nest(d0, o0, n_out, i0, n_in, dfo, dfi)
            src = _nest(s0, o0, n_out, i0, n_in, sfo, sfi)
            wgt = _nest(w0, o0, n_out, i0, n_in, wfo, wfi)
            blocks = rplan = None
            if reset and out_buffer:
                rplan = reset_plan(dst, src, wgt)
            elif not reset and dst.size >= IM2COL_MIN_UOPS:
                blocks = conv_blocks(dst, src, wgt)
            yield GemmChunk(dst.size, dst, src, wgt, as_entries(np.unique(dst)), blocks, rplan)

    return _plan(tops, chunks(), it_out * it_in * d0.size, 5)


def alu_plan(d0, s0, it_out: int, it_in: int, dfo: int, dfi: int, sfo: int, sfi: int, tensor: bool,
             depth: int) -> LoopPlan:
    tops = (loop_max(d0, it_out, it_in, dfo, dfi), loop_max(s0, it_out, it_in, sfo, sfi) if tensor else 0, 0)

    def chunks():
        for o0, n_out, i0, n_in in loop_chunks(it_out, it_in, d0.size):
            dst = _nest(d0, o0, n_out, i0, n_in, dfo, dfi)
            src = _nest(s0, o0, n_out, i0, n_in, sfo, sfi) if tensor else None
            n = dst.size
            repeated = bool(np.bincount(dst.astype(np.intp, copy=False)).max() > 1)
            reads_earlier_write = False
            if src is not None and max(src.max(), dst.max()) < depth:  # else the range check refuses it
                first_write = np.full(depth, n, dtype=np.int64)
                np.minimum.at(first_write, dst, np.arange(n, dtype=np.int64))
                reads_earlier_write = bool(np.any(first_write[src] < np.arange(n)))
            pieces = tuple(hazard_free_chunks(dst, src)) if repeated or reads_earlier_write else ((0, n),)
            yield AluChunk(n, dst, src, repeated, reads_earlier_write, pieces, as_entries(np.unique(dst)),
                           as_entries(dst), None if src is None else as_entries(src))

    return _plan(tops, chunks(), it_out * it_in * d0.size, 3)


def _plan(tops: tuple[int, int, int], chunks, uops: int, per_uop: int) -> LoopPlan:
    """Chunks built now and kept, or (huge loops) built as they run and never kept."""
    if uops > _PLAN_MAX_UOPS:
        return LoopPlan(tops, chunks, 0, cacheable=False)
    return LoopPlan(tops, tuple(chunks), uops * per_uop)


class PlanCache:
    """Plans by (kind, micro-op range contents, loop fields); bounded by index entries held."""

    def __init__(self, budget: int | None = None):
        self.budget = _CACHE_ENTRIES if budget is None else budget
        self._plans: dict[tuple, LoopPlan] = {}
        self._held = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple, build) -> LoopPlan:
        plan = self._plans.get(key)
        if plan is not None:
            self.hits += 1
            return plan
        self.misses += 1
        plan = build()
        if not plan.cacheable:
            return plan
        if self._held + plan.size > self.budget:
            self._plans.clear()
            self._held = 0
        if plan.size <= self.budget:
            self._plans[key] = plan
            self._held += plan.size
        return plan
