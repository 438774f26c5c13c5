"""conv2d on the GPU: implicit GEMM on shared-memory tiles, and a one-thread-per-output depthwise kernel.

Generic convolutions (any stride, padding, dilation and groups) are the tiled
GEMM of `gemm.py` with M = output channels of a group, N = batch x output
positions and K = input channels of a group x KH x KW; grid z is the group.
B(k, n) is read straight from the NCHW input (no im2col buffer): each thread
decodes its column's image and output position once, and each k into
(channel, kh, kw); reads outside the input (padding) give zero.

Depthwise convolutions (one input channel per group) have K = KH x KW, too
short for tiles, so each thread computes one output: its taps unrolled, the
weights read once per thread.

Validation and geometry are the host backends' (`host.conv.conv_operands`), and
the int8 epilogue is the CPU backend's (`requantise`: arithmetic shift right, clip).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from vtakit.compiler.backends.host.checks import Requant
from vtakit.compiler.backends.host.conv import OP, ConvGeometry, conv_operands
from vtakit.compiler.backends.cpu.irgen import requantise
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32
from vtakit.compiler.backends.cuda.call import Call
from vtakit.compiler.backends.cuda.device_array import DeviceArray, GpuBackend, operand
from vtakit.compiler.backends.cuda.gemm import GemmOperands, GemmTile, choose_tile, emit_gemm, gemm_launch, widen
from vtakit.compiler.backends.cuda.kernel import GpuKernelBuilder, grid_1d, make_kernel


@dataclass(frozen=True)
class TiledConv:
    geometry: ConvGeometry
    integer: bool
    has_bias: bool
    requant: Requant | None
    tile: GemmTile


def _epilogue(kb: GpuKernelBuilder, acc: ir.Value, channel: ir.Value, has_bias: bool, integer: bool,
              requant: Requant | None) -> ir.Value:
    """acc + bias[channel], requantised to int8 when asked."""
    if has_bias:
        bias = kb.load(kb["bias"], channel, I32 if integer else F32)
        acc = kb.b.add(acc, bias) if integer else kb.b.fadd(acc, bias)
    return acc if requant is None else requantise(kb, acc, requant)


def _emit_tiled_conv(kb: GpuKernelBuilder, spec: TiledConv) -> None:
    g = spec.geometry
    b = kb.b
    elem = I32 if spec.integer else F32
    x_elem = I8 if spec.integer else F32
    group = kb.block("z")
    first_out = kb.idx((group, g.group_out))
    plane = g.height * g.width
    taps = g.kernel_h * g.kernel_w

    def column(n: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        image, position = b.udiv(n, kb.i64(g.positions)), b.urem(n, kb.i64(g.positions))
        oh, ow = b.udiv(position, kb.i64(g.out_w)), b.urem(position, kb.i64(g.out_w))
        base = kb.idx((image, g.channels * plane), (group, g.group_in * plane))
        return base, kb.idx((oh, g.stride[0]), -g.pads[0]), kb.idx((ow, g.stride[1]), -g.pads[1])

    def input_value(context: tuple[ir.Value, ir.Value, ir.Value], k: ir.Value) -> ir.Value:
        base, row0, col0 = context
        channel, tap = b.udiv(k, kb.i64(taps)), b.urem(k, kb.i64(taps))
        kh, kw = b.udiv(tap, kb.i64(g.kernel_w)), b.urem(tap, kb.i64(g.kernel_w))
        ih = kb.idx(row0, (kh, g.dilation[0]))
        iw = kb.idx(col0, (kw, g.dilation[1]))
        inside = b.and_(b.icmp_unsigned("<", ih, kb.i64(g.height)), b.icmp_unsigned("<", iw, kb.i64(g.width)))
        value = kb.load(kb["x"], kb.select_index(inside, kb.idx(base, (channel, plane), (ih, g.width), iw)), x_elem)
        return b.select(inside, widen(kb, value, spec.integer), ir.Constant(elem, 0))

    def store(m: ir.Value, n: ir.Value, acc: ir.Value) -> None:
        channel = kb.idx(first_out, m)
        image, position = b.udiv(n, kb.i64(g.positions)), b.urem(n, kb.i64(g.positions))
        value = _epilogue(kb, acc, channel, spec.has_bias, spec.integer, spec.requant)
        kb.store(value, kb["y"], kb.idx((image, g.out_channels * g.positions), (channel, g.positions), position))

    ops = GemmOperands(
        elem, g.group_out, g.batch * g.positions, g.reduction,
        a_row=lambda m: kb.idx((first_out, g.reduction), (m, g.reduction)),
        a_value=lambda row, k: widen(kb, kb.load(kb["w"], kb.idx(row, k), x_elem), spec.integer),
        b_column=column, b_value=input_value, b_k_fastest=False, store=store)
    emit_gemm(kb, spec.tile, ops)


@dataclass(frozen=True)
class DepthwiseConv:
    geometry: ConvGeometry
    integer: bool
    has_bias: bool
    requant: Requant | None


def _emit_depthwise(kb: GpuKernelBuilder, spec: DepthwiseConv) -> None:
    g = spec.geometry
    b = kb.b
    acc_ty = I32 if spec.integer else F32
    x_ty = I8 if spec.integer else F32
    taps = g.kernel_h * g.kernel_w
    with kb.grid_stride(g.batch * g.out_channels * g.positions) as item:
        ow = b.urem(item, kb.i64(g.out_w))
        rest = b.udiv(item, kb.i64(g.out_w))
        oh = b.urem(rest, kb.i64(g.out_h))
        plane_index = b.udiv(rest, kb.i64(g.out_h))  # image * out_channels + out channel
        out_channel = b.urem(plane_index, kb.i64(g.out_channels))
        image = b.udiv(plane_index, kb.i64(g.out_channels))
        channel = b.udiv(out_channel, kb.i64(g.group_out)) if g.group_out > 1 else out_channel
        x_plane = kb.idx((image, g.channels * g.height * g.width), (channel, g.height * g.width))
        row0 = kb.idx((oh, g.stride[0]), -g.pads[0])
        col0 = kb.idx((ow, g.stride[1]), -g.pads[1])
        # bias first, then the taps in order, as the CPU kernel sums (same float rounding order)
        acc = kb.load(kb["bias"], out_channel, acc_ty) if spec.has_bias else ir.Constant(acc_ty, 0)
        for kh in range(g.kernel_h):
            ih = kb.idx(row0, kh * g.dilation[0])
            row_inside = b.icmp_unsigned("<", ih, kb.i64(g.height))
            for kw in range(g.kernel_w):
                iw = kb.idx(col0, kw * g.dilation[1])
                inside = b.and_(row_inside, b.icmp_unsigned("<", iw, kb.i64(g.width)))
                value = kb.load(kb["x"], kb.select_index(inside, kb.idx(x_plane, (ih, g.width), iw)), x_ty)
                value = b.select(inside, widen(kb, value, spec.integer), ir.Constant(acc_ty, 0))
                weight = widen(kb, kb.load(kb["w"], kb.idx((out_channel, taps), kh * g.kernel_w + kw), x_ty),
                               spec.integer)
                acc = kb.multiply_add(weight, value, acc)
        value = acc if spec.requant is None else requantise(kb, acc, spec.requant)
        kb.store(value, kb["y"], item)


def conv2d(x, w, bias=None, *, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
           shift: int | None = None, clip: tuple[int, int] | None = None, gpu: GpuBackend | None = None):
    """NCHW x (*) OIHW w, ONNX Conv semantics; int8 in -> int32 out, or int8 with shift/clip (as cpu.conv2d)."""
    checked = conv_operands(x, w, bias, stride, pads, dilation, groups, shift, clip, operand)
    x, w, bias, integer, requant, g = (checked.x, checked.w, checked.bias, checked.integer, checked.requant,
                                       checked.geometry)
    pointers = ["x", "w", "bias", "y"]
    if g.group_in == 1 and g.groups > 1:
        spec = DepthwiseConv(g, integer, bias is not None, requant)
        kernel = make_kernel("conv2d_depthwise", spec, grid_1d(g.batch * g.out_channels * g.positions), pointers,
                             [], _emit_depthwise)
    else:
        tile = choose_tile(g.group_out, g.batch * g.positions, g.groups)
        spec = TiledConv(g, integer, bias is not None, requant, tile)
        kernel = make_kernel("conv2d", spec, gemm_launch(tile, g.group_out, g.batch * g.positions, g.groups),
                             pointers, [], _emit_tiled_conv)
    call = Call(OP, [x, w, bias], gpu)
    y = call.empty((g.batch, g.out_channels, g.out_h, g.out_w), checked.out_dtype)
    bias_arg: DeviceArray = call.device(bias) if bias is not None else y
    call.launch(kernel, call.device(x), call.device(w), bias_arg, y)
    return call.result(y)
