"""The shared-memory tiled GEMM under conv2d, dense and matmul, and matmul itself.

C[m, n] = sum_k A(m, k) * B(k, n), where A and B are callbacks, so a conv's B
is its im2col matrix read straight from the NCHW input (implicit GEMM) and
dense reads its input transposed in place.  A block of 16 x 16 threads owns a
`rows x columns` tile of C; each thread keeps (rows/16) x (columns/16)
accumulators in registers, at rows ty + 16 i and columns tx + 16 j (so a warp's
shared-memory reads of B are consecutive and those of A broadcast).  The K loop
steps by 16: all 256 threads copy the A and B tiles into shared memory (A's
rows padded by one element against bank conflicts), barrier, multiply, barrier.

int8 operands are widened to int32 as they enter shared memory and accumulate
in int32, whose wrapping sums do not depend on order, so results equal the CPU
backend's bit for bit; float32 results differ only by summation order.

Tile rule: start at 64 x 64 (16 outputs per thread) and halve rows, then
columns, down to 16 while the grid would have fewer than 128 blocks, so small
layers still fill the GPU's multiprocessors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from vtakit.compiler.backends.host.matmul import batch_offsets, matmul_batch, matmul_operands
from vtakit.compiler.backends.cpu.irgen import F32, I32, I64
from vtakit.compiler.backends.cuda.call import Call
from vtakit.compiler.backends.cuda.device_array import GpuBackend, operand
from vtakit.compiler.backends.cuda.kernel import GpuKernelBuilder, Launch, make_kernel
from vtakit.isa.arith import ceil_div

SIDE = 16            # threads per block along x and y
THREADS = SIDE * SIDE
DEPTH = 16           # K per shared-memory tile
MIN_BLOCKS = 128


@dataclass(frozen=True)
class GemmTile:
    """C tile per block: `rows` (of M) x `columns` (of N), each a multiple of 16 up to 64."""

    rows: int
    columns: int

    def blocks(self, m: int, n: int) -> int:
        return ceil_div(m, self.rows) * ceil_div(n, self.columns)


def choose_tile(m: int, n: int, batches: int = 1) -> GemmTile:
    """The tile rule of the module docstring."""
    rows = 64 if m > 32 else 32 if m > 16 else 16
    columns = 64 if n > 16 else 16
    while GemmTile(rows, columns).blocks(m, n) * batches < MIN_BLOCKS and (rows > 16 or columns > 16):
        if rows > 16:
            rows //= 2
        else:
            columns = 16
    return GemmTile(rows, columns)


def gemm_launch(tile: GemmTile, m: int, n: int, batches: int) -> Launch:
    """Blocks over (column tiles, row tiles, batches) of 16 x 16 threads."""
    return Launch((ceil_div(n, tile.columns), ceil_div(m, tile.rows), batches), (SIDE, SIDE, 1))


@dataclass
class GemmOperands:
    """How one kernel reads A and B and writes C (callbacks run while the kernel is emitted)."""

    elem: ir.Type                                     # I32 (int8 inputs) or F32: accumulator and tile type
    m: int
    n: int
    k: int
    a_row: Callable[[ir.Value], Any]                  # context for row m (m always in range)
    a_value: Callable[[Any, ir.Value], ir.Value]      # A(m, k) widened to elem (k always in range)
    b_column: Callable[[ir.Value], Any]               # context for column n (n always in range)
    b_value: Callable[[Any, ir.Value], ir.Value]      # B(k, n) widened to elem
    b_k_fastest: bool                                 # consecutive threads load consecutive k of B (else n)
    store: Callable[[ir.Value, ir.Value, ir.Value], None]  # (m, n, accumulator), called only in range


def emit_gemm(kb: GpuKernelBuilder, tile: GemmTile, ops: GemmOperands) -> None:
    """The whole kernel body for the block at (ctaid.x, ctaid.y): see the module docstring."""
    b = kb.b
    zero = ir.Constant(ops.elem, 0)
    tx, ty = kb.thread("x"), kb.thread("y")
    flat = kb.idx((ty, SIDE), tx)
    m0 = kb.idx((kb.block("y"), tile.rows))
    n0 = kb.idx((kb.block("x"), tile.columns))
    a_pitch = tile.rows + 1
    a_tile = kb.shared_array(ops.elem, DEPTH * a_pitch, "a_tile")
    b_tile = kb.shared_array(ops.elem, DEPTH * tile.columns, "b_tile")
    k_tail = ops.k % DEPTH != 0

    def in_range(value: ir.Value, limit: int) -> ir.Value:
        return b.icmp_unsigned("<", value, kb.i64(limit))

    # Which tile elements this thread copies: (k within the tile, m or n within the tile) per copy.
    a_k = b.urem(flat, kb.i64(DEPTH))
    a_loads = []
    for r in range(DEPTH * tile.rows // THREADS):
        local = kb.idx(b.udiv(flat, kb.i64(DEPTH)), r * THREADS // DEPTH)
        m = kb.idx(m0, local)
        valid = in_range(m, ops.m)
        a_loads.append((local, valid, ops.a_row(kb.select_index(valid, m))))
    b_loads = []
    for r in range(DEPTH * tile.columns // THREADS):
        if ops.b_k_fastest:
            k_local, local = a_k, kb.idx(b.udiv(flat, kb.i64(DEPTH)), r * THREADS // DEPTH)
        else:
            k_local = kb.idx(b.udiv(flat, kb.i64(tile.columns)), r * THREADS // tile.columns)
            local = b.urem(flat, kb.i64(tile.columns))
        n = kb.idx(n0, local)
        valid = in_range(n, ops.n)
        b_loads.append((k_local, local, valid, ops.b_column(kb.select_index(valid, n))))

    rows, columns = tile.rows // SIDE, tile.columns // SIDE
    accumulators = [[kb.var(ops.elem, zero) for _ in range(columns)] for _ in range(rows)]

    def fetch(valid: ir.Value, k: ir.Value, read: Callable[[ir.Value], ir.Value]) -> ir.Value:
        if k_tail:
            k_valid = in_range(k, ops.k)
            valid = b.and_(valid, k_valid)
            k = kb.select_index(k_valid, k)
        return b.select(valid, read(k), zero)

    with kb.loop(ops.k, step=DEPTH, name="k0") as k0:
        for local, valid, context in a_loads:
            value = fetch(valid, kb.idx(k0, a_k), lambda k, row=context: ops.a_value(row, k))
            kb.store(value, a_tile, kb.idx((a_k, a_pitch), local))
        for k_local, local, valid, context in b_loads:
            value = fetch(valid, kb.idx(k0, k_local), lambda k, column=context: ops.b_value(column, k))
            kb.store(value, b_tile, kb.idx((k_local, tile.columns), local))
        kb.barrier()
        for kk in range(DEPTH):
            a_values = [kb.load(a_tile, kb.idx(ty, kk * a_pitch + SIDE * i), ops.elem) for i in range(rows)]
            b_values = [kb.load(b_tile, kb.idx(tx, kk * tile.columns + SIDE * j), ops.elem) for j in range(columns)]
            for i in range(rows):
                for j in range(columns):
                    slot = accumulators[i][j]
                    if ops.elem == F32:
                        kb.set(slot, kb.fma(a_values[i], b_values[j], kb.get(slot)))
                    else:
                        kb.set(slot, b.add(b.mul(a_values[i], b_values[j]), kb.get(slot)))
        kb.barrier()
    for i in range(rows):
        m = kb.idx(m0, ty, SIDE * i)
        for j in range(columns):
            n = kb.idx(n0, tx, SIDE * j)
            with kb.if_then(b.and_(in_range(m, ops.m), in_range(n, ops.n))):
                ops.store(m, n, kb.get(accumulators[i][j]))


# -- matmul ------------------------------------------------------------------

@dataclass(frozen=True)
class MatmulSpec:
    batch: int
    m: int
    k: int
    n: int
    tile: GemmTile


def _emit_matmul(kb: GpuKernelBuilder, spec: MatmulSpec) -> None:
    item = kb.block("z")
    a_base = kb.load(kb["a_offsets"], item, I64)
    b_base = kb.load(kb["b_offsets"], item, I64)
    c_base = kb.idx((item, spec.m * spec.n))
    ops = GemmOperands(
        F32, spec.m, spec.n, spec.k,
        a_row=lambda m: kb.idx(a_base, (m, spec.k)),
        a_value=lambda row, k: kb.load(kb["a"], kb.idx(row, k), F32),
        b_column=lambda n: kb.idx(b_base, n),
        b_value=lambda column, k: kb.load(kb["b"], kb.idx(column, (k, spec.n)), F32),
        b_k_fastest=False,
        store=lambda m, n, acc: kb.store(acc, kb["c"], kb.idx(c_base, (m, spec.n), n)))
    emit_gemm(kb, spec.tile, ops)


def matmul(a, b, *, gpu: GpuBackend | None = None):
    """float32 numpy/ONNX MatMul: 1-D operands promoted, leading batch dims broadcast."""
    op = "matmul"
    a, b, a_shape, b_shape = matmul_operands(a, b, operand)
    batch_shape = matmul_batch(a_shape, b_shape)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = math.prod(batch_shape)
    tile = choose_tile(m, n, batch)
    spec = MatmulSpec(batch, m, k, n, tile)
    kernel = make_kernel("matmul", spec, gemm_launch(tile, m, n, batch), ["a", "b", "c", "a_offsets", "b_offsets"],
                         [], _emit_matmul)
    call = Call(op, [a, b], gpu)
    a_offsets = call.device(batch_offsets(a_shape[:-2], batch_shape, m * k))
    b_offsets = call.device(batch_offsets(b_shape[:-2], batch_shape, k * n))
    c = call.empty((*batch_shape, m, n), np.float32)
    call.launch(kernel, call.device(a), call.device(b), c, a_offsets, b_offsets)
    out_shape = (*batch_shape, m, n)
    if a.ndim == 1:
        out_shape = (*out_shape[:-2], n)
    if b.ndim == 1:
        out_shape = out_shape[:-1]
    return call.result(c.reshape(out_shape))


def widen(kb: GpuKernelBuilder, value: ir.Value, integer: bool) -> ir.Value:
    """An int8 element as the int32 the tiles hold (float32 passes through)."""
    return kb.b.sext(value, I32) if integer else value
