"""The register-blocked GEMM micro-kernel, shared by conv2d and matmul, and matmul itself.

C[m, n] = sum_k A[m, k] * B[k, n].  One tile keeps `rows x vectors` vector
accumulators in registers: each step of k broadcasts `rows` scalars of A and
loads `vectors` contiguous vectors of B, then issues rows*vectors FMAs, so the
loop is bound by FMA throughput rather than by loads.  Tiles walk a panel of
`vectors * lanes` columns of B; column tails use masked loads/stores.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.cpu import buffers

from vtakit.compiler.backends.host.matmul import batch_offsets, matmul_batch, matmul_operands
from vtakit.compiler.backends.cpu.irgen import F32, I64, Index, KernelBuilder, pointer, vec
from vtakit.compiler.backends.cpu.jit import KernelKey, cached_plan, get_kernel, host_target
from vtakit.errors import pc_side_missing
from vtakit.isa.arith import ceil_div

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)


@dataclass(frozen=True)
class Tile:
    """Register block: `rows` of A by `vectors` vectors of `lanes` columns of B."""

    rows: int
    vectors: int
    lanes: int

    @property
    def columns(self) -> int:
        return self.vectors * self.lanes


def default_tile() -> Tile:
    """A block whose accumulators, B vectors and A broadcast fit the vector register file.

    8 x 2 (16 accumulators of 32) measured best on AVX-512 for ResNet-like
    shapes (channel counts are multiples of 8); 6 x 2 uses 15 of AVX2's 16.
    """
    host = host_target()
    lanes = host.lanes(32)
    if host.vector_registers >= 32:
        return Tile(rows=8, vectors=2, lanes=lanes)
    return Tile(rows=6, vectors=2, lanes=lanes)


@dataclass
class PanelSpec:
    """Where one panel of the product reads and writes (index callbacks take m, an i64)."""

    elem: ir.Type                          # accumulator type: F32 or I32
    rows: int                              # M
    depth: int                             # K
    a: ir.Value
    a_row: Callable[[ir.Value], ir.Value]  # index of A[m, 0]; A[m, k] is at +k
    b: ir.Value
    b_base: Index                          # index of B[0, first column of the panel]
    b_stride: int                          # elements between B[k, n] and B[k + 1, n]
    b_exact: bool                          # B is readable past the valid columns (packed, zero padded)
    c: ir.Value
    c_row: Callable[[ir.Value], ir.Value]  # index of C[m, first column of the panel]
    init: Callable[[ir.Value], ir.Value | None] = lambda m: None        # scalar start value per row
    epilogue: Callable[[ir.Value, ir.Value], ir.Value] = lambda acc, m: acc  # before the store


def emit_panel(kb: KernelBuilder, tile: Tile, spec: PanelSpec, columns: int) -> None:
    """All rows of C for one panel of `columns` (<= tile.columns) valid columns."""
    full = spec.rows // tile.rows * tile.rows
    if full:
        with kb.loop(full, step=tile.rows, name="m") as m0:
            _emit_tile(kb, tile, spec, m0, tile.rows, columns)
    if spec.rows > full:
        _emit_tile(kb, tile, spec, kb.i64(full), spec.rows - full, columns)


def _emit_tile(kb: KernelBuilder, tile: Tile, spec: PanelSpec, m0: ir.Value, rows: int, columns: int) -> None:
    b = kb.b
    lanes = tile.lanes
    vty = vec(spec.elem, lanes)
    vectors = ceil_div(columns, lanes)
    masks = [None] * vectors
    if columns % lanes:
        masks[-1] = kb.lane_mask(lanes, columns % lanes)
    row_index = [kb.idx(m0, r) for r in range(rows)]
    zero = ir.Constant(vty, None)
    accumulators = []
    for r in range(rows):
        start = spec.init(row_index[r])
        first = zero if start is None else kb.splat(start, lanes)
        accumulators.append([kb.var(vty, first) for _ in range(vectors)])
    a_rows = [spec.a_row(m) for m in row_index]
    with kb.loop(spec.depth, name="k") as k:
        b_row = kb.idx(spec.b_base, (k, spec.b_stride))
        b_vectors = []
        for j in range(vectors):
            at = kb.idx(b_row, j * lanes)
            if masks[j] is not None and not spec.b_exact:
                b_vectors.append(kb.masked_vload(spec.b, at, vty, masks[j]))
            else:
                b_vectors.append(kb.vload(spec.b, at, vty))
        for r in range(rows):
            a_value = kb.splat(kb.load(spec.a, kb.idx(a_rows[r], k), spec.elem), lanes)
            for j in range(vectors):
                slot = accumulators[r][j]
                if spec.elem == F32:
                    kb.set(slot, kb.fma(a_value, b_vectors[j], kb.get(slot)))
                else:
                    kb.set(slot, b.add(b.mul(a_value, b_vectors[j]), kb.get(slot)))
    for r in range(rows):
        c_row = spec.c_row(row_index[r])
        for j in range(vectors):
            value = spec.epilogue(kb.get(accumulators[r][j]), row_index[r])
            at = kb.idx(c_row, j * lanes)
            if masks[j] is None:
                kb.vstore(value, spec.c, at)
            else:
                kb.masked_vstore(value, spec.c, at, masks[j])


# -- matmul ------------------------------------------------------------------

@dataclass(frozen=True)
class MatmulShape:
    batch: int
    m: int
    k: int
    n: int


def _build_matmul(shape: MatmulShape, tile: Tile):
    """C[i] = A[a_off[i]] @ B[b_off[i]] for each batch entry i (offsets in elements)."""
    kb = KernelBuilder("matmul", ["a", "b", "c", "a_offsets", "b_offsets"])
    m, k, n = shape.m, shape.k, shape.n
    with kb.loop(shape.batch, name="batch") as item:
        a_base = kb.load(kb["a_offsets"], item, I64)
        b_base = kb.load(kb["b_offsets"], item, I64)
        c_base = kb.idx((item, m * n))

        def panel(first_column: Index, columns: int) -> None:
            spec = PanelSpec(
                elem=F32, rows=m, depth=k, a=kb["a"], a_row=lambda row: kb.idx(a_base, (row, k)),
                b=kb["b"], b_base=kb.idx(b_base, first_column), b_stride=n, b_exact=False,
                c=kb["c"], c_row=lambda row: kb.idx(c_base, (row, n), first_column))
            emit_panel(kb, tile, spec, columns)

        full = n // tile.columns * tile.columns
        if full:
            with kb.loop(full, step=tile.columns, name="n") as n0:
                panel(n0, tile.columns)
        if n > full:
            panel(full, n - full)
    return kb.finish()


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 numpy/ONNX MatMul: 1-D operands promoted, leading batch dims broadcast."""
    a, b, a_shape, b_shape = matmul_operands(a, b)
    a2, b2 = a.reshape(a_shape), b.reshape(b_shape)
    plan = cached_plan(("matmul", a2.shape, b2.shape), lambda: _plan(a2.shape, b2.shape))
    kernel, a_offsets, b_offsets, out_shape = plan
    c = buffers.empty(out_shape, np.float32)
    kernel(pointer(a2), pointer(b2), pointer(c), pointer(a_offsets), pointer(b_offsets))
    n = b2.shape[-1]
    if a.ndim == 1:
        c = c.reshape((*c.shape[:-2], n))
    if b.ndim == 1:
        c = c.reshape(c.shape[:-1])
    return c


def _plan(a_shape: tuple[int, ...], b_shape: tuple[int, ...]):
    """(kernel, A offsets, B offsets, C shape); offsets locate each batch entry's matrices, in elements."""
    batch_shape = matmul_batch(a_shape, b_shape)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    shape = MatmulShape(math.prod(batch_shape), m, k, n)
    tile = default_tile()
    kernel = get_kernel(KernelKey("matmul", (shape, tile)), lambda: _build_matmul(shape, tile), "matmul")
    return (kernel, batch_offsets(a_shape[:-2], batch_shape, m * k), batch_offsets(b_shape[:-2], batch_shape, k * n),
            (*batch_shape, m, n))
