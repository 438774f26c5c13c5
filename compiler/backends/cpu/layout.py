"""Layout kernels: transpose, pad, concat and the accelerator's blocked activation layout.

All of them are one primitive, a copy from one strided view to another of the
same shape (elements moved as integers of their width, so every dtype shares
the kernels).  The views come from numpy (x.transpose(perm), out[interior]) and
only their shapes and strides reach the kernel key.  When the source is read
across its contiguous dimension (a real transpose), the two dimensions that are
contiguous in source and destination are cut into square blocks transposed in
registers, so both sides are read and written as whole vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.cpu import buffers

from vtakit.compiler.backends.host.layout import (concat_operands, layout_array, pack_operands, pad_widths,
                                                  permutation, unpack_operands)
from vtakit.compiler.backends.host.elementwise import collapse
from vtakit.compiler.backends.cpu.irgen import I32, KernelBuilder, elem_type, pointer, vec
from vtakit.compiler.backends.cpu.jit import KernelKey, cached_plan, get_kernel, host_target
from vtakit.errors import pc_side_missing
from vtakit.isa.arith import ceil_div

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)



@dataclass(frozen=True)
class CopyKernel:
    shape: tuple[int, ...]
    source_strides: tuple[int, ...]
    dest_strides: tuple[int, ...]
    dtype: str
    block: int  # side of the in-register transpose blocks (host vector width)


def _transpose_lanes(itemsize: int) -> int:
    """Block size for in-register transposes: up to 16 elements, one vector per row."""
    return min(16, host_target().vector_bits // (8 * itemsize))


def _emit_block_transpose(kb: KernelBuilder, spec: CopyKernel, ty, lanes: int, src: ir.Value, dst: ir.Value,
                          a_dim: int, b_dim: int) -> None:
    """Copy a lanes x lanes block: rows contiguous in the source become rows contiguous in the destination.

    Row b of the block is source elements (a0 .. a0+lanes-1, b0 + b); log2(lanes)
    rounds of pairwise interleaving (row i with row i + lanes/2) transpose the
    block in registers, so both the loads and the stores are full vectors.
    """
    b = kb.b
    vty = vec(ty, lanes)
    rows = [kb.vload(kb["src"], kb.idx(src, r * spec.source_strides[b_dim]), vty) for r in range(lanes)]
    half = lanes // 2
    low = ir.Constant(vec(I32, lanes), [j // 2 + (lanes if j % 2 else 0) for j in range(lanes)])
    high = ir.Constant(vec(I32, lanes), [half + j // 2 + (lanes if j % 2 else 0) for j in range(lanes)])
    for _ in range(lanes.bit_length() - 1):
        rows = [shuffled for i in range(half)
                for shuffled in (b.shuffle_vector(rows[i], rows[i + half], low),
                                 b.shuffle_vector(rows[i], rows[i + half], high))]
    for r in range(lanes):
        kb.vstore(rows[r], kb["dst"], kb.idx(dst, r * spec.dest_strides[a_dim]))


def _build_copy(spec: CopyKernel):
    kb = KernelBuilder("strided_copy", ["src", "dst"])
    ty = elem_type(spec.dtype)
    rank = len(spec.shape)
    last = rank - 1
    lanes = spec.block
    transposed = next((d for d in range(rank - 1) if spec.source_strides[d] == 1 and spec.dest_strides[last] == 1
                       and spec.source_strides[last] != 1), None)
    if transposed is not None and (lanes < 2 or min(spec.shape[transposed], spec.shape[last]) < lanes):
        transposed = None
    indices: dict[int, ir.Value] = {}

    def offsets(dims: Sequence[int]) -> tuple[ir.Value, ir.Value]:
        src = kb.idx(*((indices[d], spec.source_strides[d]) for d in dims))
        dst = kb.idx(*((indices[d], spec.dest_strides[d]) for d in dims))
        return src, dst

    def elementwise(dims: list[int], bounds: dict[int, tuple[int, int]]) -> None:
        if not dims:
            src, dst = offsets(range(rank))
            kb.store(kb.load(kb["src"], src, ty), kb["dst"], dst)
            return
        start, stop = bounds.get(dims[0], (0, spec.shape[dims[0]]))
        if start < stop:
            with kb.loop(stop, start=start, name=f"d{dims[0]}") as i:
                indices[dims[0]] = i
                elementwise(dims[1:], bounds)

    def blocks(a_dim: int) -> None:
        """Full blocks over (a_dim, last) transposed in registers, the ragged edges element by element."""
        a_full = spec.shape[a_dim] // lanes * lanes
        b_full = spec.shape[last] // lanes * lanes
        with kb.loop(a_full, step=lanes, name="a") as a0, kb.loop(b_full, step=lanes, name="b") as b0:
            indices[a_dim], indices[last] = a0, b0
            src, dst = offsets(range(rank))
            _emit_block_transpose(kb, spec, ty, lanes, src, dst, a_dim, last)
        elementwise([a_dim, last], {a_dim: (a_full, spec.shape[a_dim])})
        elementwise([a_dim, last], {a_dim: (0, a_full), last: (b_full, spec.shape[last])})

    def nest(order: list[int]) -> None:
        if not order:
            blocks(transposed)
            return
        with kb.loop(spec.shape[order[0]], name=f"d{order[0]}") as i:
            indices[order[0]] = i
            nest(order[1:])

    if transposed is None:
        elementwise(list(range(rank)), {})
    else:
        nest([d for d in range(rank) if d not in (transposed, last)])
    return kb.finish()


def copy_into(dest: np.ndarray, source: np.ndarray, op: str) -> None:
    """dest[...] = source for two same-shape, same-dtype views (any strides >= 0)."""
    signature = ("copy", source.shape, source.strides, dest.strides, source.itemsize)
    kernel = cached_plan(signature, lambda: _plan_copy(dest, source, op))
    kernel(pointer(source), pointer(dest))


def _plan_copy(dest: np.ndarray, source: np.ndarray, op: str):
    itemsize = source.itemsize
    shape, (source_strides, dest_strides) = collapse(
        source.shape, [[s // itemsize for s in source.strides], [s // itemsize for s in dest.strides]])
    spec = CopyKernel(shape, source_strides, dest_strides, f"int{itemsize * 8}", _transpose_lanes(itemsize))
    return get_kernel(KernelKey("copy", (spec,)), lambda: _build_copy(spec), op)


def transpose(x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    """np.transpose(x, perm) materialised contiguously (rank <= 6)."""
    op = "transpose"
    x = layout_array(x, "x", op)
    order = permutation(perm, x.ndim, op)
    view = x.transpose(order)
    out = buffers.empty(view.shape, x.dtype)
    copy_into(out, view, op)
    return out


def pad(x: np.ndarray, pads: Sequence[int], value=0) -> np.ndarray:
    """ONNX Pad (constant mode): pads = [x1_begin, x2_begin, ..., x1_end, x2_end, ...], all >= 0."""
    op = "pad"
    x = layout_array(x, "x", op)
    widths = pad_widths(x, pads, value, op)
    out = buffers.full(widths.shape, widths.fill, x.dtype)
    interior = tuple(slice(lo, lo + size) for lo, size in zip(widths.begins, x.shape))
    copy_into(out[interior], x, op)
    return out


def concat(xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
    """np.concatenate(xs, axis) for arrays of one dtype and rank."""
    op = "concat"
    arrays, axis = concat_operands(xs, axis, op)
    first = arrays[0]
    total = sum(a.shape[axis] for a in arrays)
    out = buffers.empty(first.shape[:axis] + (total,) + first.shape[axis + 1:], first.dtype)
    offset = 0
    for a in arrays:
        index = (slice(None),) * axis + (slice(offset, offset + a.shape[axis]),)
        copy_into(out[index], a, op)
        offset += a.shape[axis]
    return out


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(N, C, H, W) -> (N/b, C/block, H, W, b, block), zero padded (as compiler.runtime)."""
    op = "pack_activation"
    x, batch, block = pack_operands(x, batch, block, op)
    n, c, h, w = x.shape
    nb, cb = ceil_div(n, batch), ceil_div(c, block)
    if (nb * batch, cb * block) != (n, c):
        x = pad(x, [0, 0, 0, 0, nb * batch - n, cb * block - c, 0, 0])
    source = x.reshape(nb, batch, cb, block, h, w).transpose(0, 2, 4, 5, 1, 3)
    out = buffers.empty(source.shape, x.dtype)
    copy_into(out, source, op)
    return out


def unpack_activation(y: np.ndarray, n: int, c: int) -> np.ndarray:
    """(N/b, C/block, H, W, b, block) -> (N, C, H, W), dropping the padding."""
    op = "unpack_activation"
    y, n, c = unpack_operands(y, n, c, op)
    nb, cb, h, w, batch, block = y.shape
    source = y.transpose(0, 4, 1, 5, 2, 3)
    if (n, c) == (nb * batch, cb * block):
        out = buffers.empty((n, c, h, w), y.dtype)
        copy_into(out.reshape(source.shape), source, op)
        return out
    full = buffers.empty(source.shape, y.dtype)
    copy_into(full, source, op)
    out = buffers.empty((n, c, h, w), y.dtype)
    copy_into(out, full.reshape(nb * batch, cb * block, h, w)[:n, :c], op)
    return out
