"""Layout kernels on the GPU: transpose, pad, concat and the accelerator's packed activation layout.

Like the CPU backend's, they are copies between strided views (elements moved
as integers of their width, so every dtype shares a kernel): the strides are
computed here from shapes, the copy is `elementwise`'s grid-stride strided
kernel, one thread per element, writes in destination order (coalesced).  Pad
is its own kernel: each output element reads its source or the fill value, so
no separate fill pass is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from vtakit.compiler.backends.cpu.irgen import elem_type
from vtakit.compiler.backends.host.layout import (concat_operands, layout_array, pack_operands, pad_widths,
                                                  permutation, unpack_operands)
from vtakit.compiler.backends.cuda.call import Call
from vtakit.compiler.backends.cuda.device_array import DeviceArray, GpuBackend, contiguous_strides, operand
from vtakit.compiler.backends.cuda.elementwise import run_strided
from vtakit.compiler.backends.cuda.kernel import GpuKernelBuilder, grid_1d, make_kernel
from vtakit.isa.arith import ceil_div


def _copy(call: Call, source: DeviceArray, shape: tuple[int, ...], source_strides: Sequence[int],
          dest: DeviceArray, dest_strides: Sequence[int], dest_offset: int = 0) -> None:
    run_strided(call, "copy", [(source, tuple(source_strides), 0)], shape, dest, tuple(dest_strides), dest_offset)


def transpose(x, perm: Sequence[int], *, gpu: GpuBackend | None = None):
    """np.transpose(x, perm) materialised contiguously (rank <= 6)."""
    op = "transpose"
    x = layout_array(x, "x", op, operand)
    order = permutation(perm, x.ndim, op)
    call = Call(op, [x], gpu)
    source = call.device(x)
    strides = contiguous_strides(x.shape)
    shape = tuple(x.shape[p] for p in order)
    out = call.empty(shape, x.dtype)
    _copy(call, source, shape, [strides[p] for p in order], out, contiguous_strides(shape))
    return call.result(out)


@dataclass(frozen=True)
class PadSpec:
    shape: tuple[int, ...]    # output
    begins: tuple[int, ...]
    sizes: tuple[int, ...]    # input
    dtype: str
    fill_bits: int            # the fill value's bit pattern as an integer of the element's width


def _emit_pad(kb: GpuKernelBuilder, spec: PadSpec) -> None:
    b = kb.b
    ty = elem_type(spec.dtype)
    source_strides = contiguous_strides(spec.sizes)
    with kb.grid_stride(math.prod(spec.shape)) as item:
        rest, inside, source = item, None, []
        for dim in reversed(range(len(spec.shape))):
            coordinate = b.urem(rest, kb.i64(spec.shape[dim])) if dim else rest
            rest = b.udiv(rest, kb.i64(spec.shape[dim])) if dim else rest
            shifted = kb.idx(coordinate, -spec.begins[dim])
            within = b.icmp_unsigned("<", shifted, kb.i64(spec.sizes[dim]))
            inside = within if inside is None else b.and_(inside, within)
            source.append((shifted, source_strides[dim]))
        value = kb.load(kb["x"], kb.select_index(inside, kb.idx(*source)), ty)
        kb.store(b.select(inside, value, ir.Constant(ty, spec.fill_bits)), kb["y"], item)


def pad(x, pads: Sequence[int], value=0, *, gpu: GpuBackend | None = None):
    """ONNX Pad (constant mode): pads = [x1_begin, x2_begin, ..., x1_end, x2_end, ...], all >= 0."""
    op = "pad"
    x = layout_array(x, "x", op, operand)
    widths = pad_widths(x, pads, value, op)
    shape = widths.shape
    bits = int(np.asarray(widths.fill, x.dtype).view(f"u{x.dtype.itemsize}"))
    if bits >= 1 << (8 * x.dtype.itemsize - 1):  # as a signed integer of the element's width
        bits -= 1 << (8 * x.dtype.itemsize)
    spec = PadSpec(shape, widths.begins, tuple(x.shape), f"int{x.dtype.itemsize * 8}", bits)
    kernel = make_kernel(op, spec, grid_1d(math.prod(shape)), ["x", "y"], [], _emit_pad)
    call = Call(op, [x], gpu)
    out = call.empty(shape, x.dtype)
    call.launch(kernel, call.device(x), out)
    return call.result(out)


def concat(xs: Sequence, axis: int, *, gpu: GpuBackend | None = None):
    """np.concatenate(xs, axis) for arrays of one dtype and rank."""
    op = "concat"
    arrays, axis = concat_operands(xs, axis, op, operand, (np.ndarray, DeviceArray))
    first = arrays[0]
    call = Call(op, arrays, gpu)
    shape = first.shape[:axis] + (sum(a.shape[axis] for a in arrays),) + first.shape[axis + 1:]
    out = call.empty(shape, first.dtype)
    out_strides = contiguous_strides(shape)
    offset = 0
    for a in arrays:
        _copy(call, call.device(a), tuple(a.shape), contiguous_strides(a.shape), out, out_strides,
              offset * out_strides[axis])
        offset += a.shape[axis]
    return call.result(out)


def pack_activation(x, batch: int, block: int, *, gpu: GpuBackend | None = None):
    """(N, C, H, W) -> (N/b, C/block, H, W, b, block), zero padded (as cpu.pack_activation)."""
    op = "pack_activation"
    x, batch, block = pack_operands(x, batch, block, op, operand)
    call = Call(op, [x], gpu)
    source = call.device(x)
    n, c, h, w = x.shape
    nb, cb = ceil_div(n, batch), ceil_div(c, block)
    if (nb * batch, cb * block) != (n, c):
        source = pad(source, [0, 0, 0, 0, nb * batch - n, cb * block - c, 0, 0])
    strides = contiguous_strides((nb, batch, cb, block, h, w))
    order = (0, 2, 4, 5, 1, 3)
    shape = (nb, cb, h, w, batch, block)
    out = call.empty(shape, x.dtype)
    _copy(call, source, shape, [strides[p] for p in order], out, contiguous_strides(shape))
    return call.result(out)


def unpack_activation(y, n: int, c: int, *, gpu: GpuBackend | None = None):
    """(N/b, C/block, H, W, b, block) -> (N, C, H, W), dropping the padding (as cpu.unpack_activation)."""
    op = "unpack_activation"
    y, n, c = unpack_operands(y, n, c, op, operand)
    nb, cb, h, w, batch, block = y.shape
    call = Call(op, [y], gpu)
    strides = contiguous_strides(y.shape)
    # out[i, j, r, s] with i = (ib, bi), j = (jb, bj) reads y[ib, jb, r, s, bi, bj]
    shape = (nb, batch, cb, block, h, w)
    source_strides = [strides[0], strides[4], strides[1], strides[5], strides[2], strides[3]]
    full_shape = (nb * batch, cb * block, h, w)
    full = call.empty(full_shape, y.dtype)
    full_strides = contiguous_strides(full_shape)
    dest_strides = [batch * full_strides[0], full_strides[0], block * full_strides[1], full_strides[1],
                    full_strides[2], full_strides[3]]
    _copy(call, call.device(y), shape, source_strides, full, dest_strides)
    if (n, c) == (nb * batch, cb * block):
        return call.result(full)
    out = call.empty((n, c, h, w), y.dtype)  # a partial last block: keep the first n images and c channels
    _copy(call, full, (n, c, h, w), full_strides, out, contiguous_strides((n, c, h, w)))
    return call.result(out)
