"""Depthwise conv2d (groups == input channels): one plane at a time, vectorised along width.

A GEMM would have K = KH*KW (9 for 3x3), far too short to amortise anything, so
instead each input plane is copied once into a zero-bordered scratch plane and
every output row is an unrolled sum of KH*KW shifted rows of it, weights held in
registers.  The innermost loop runs over output columns with no branches, so
LLVM vectorises it (strided loads for stride 2).  The border of the scratch
plane is zeroed once per call; copies only overwrite its interior.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.cpu import buffers
from vtakit.errors import pc_side_missing

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Requant
from vtakit.compiler.backends.host.conv import OP, ConvGeometry
from vtakit.compiler.backends.cpu.irgen import requantise
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32, KernelBuilder, pointer
from vtakit.compiler.backends.cpu.jit import KernelKey, get_kernel

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)


@dataclass(frozen=True)
class DepthwiseKernel:
    geometry: ConvGeometry
    integer: bool
    has_bias: bool
    requant: Requant | None

    @property
    def padded(self) -> bool:
        return any(self.geometry.pads)

    @property
    def plane_shape(self) -> tuple[int, int]:
        g = self.geometry
        return g.height + g.pads[0] + g.pads[2], g.width + g.pads[1] + g.pads[3]


def _build_depthwise(spec: DepthwiseKernel):
    g = spec.geometry
    kb = KernelBuilder("conv2d_depthwise", ["x", "w", "bias", "y", "plane"])
    b = kb.b
    acc_ty = I32 if spec.integer else F32
    x_ty = I8 if spec.integer else F32
    plane_h, plane_w = spec.plane_shape
    taps = g.kernel_h * g.kernel_w
    multiplier = g.group_out

    def widen(value: ir.Value) -> ir.Value:
        return b.sext(value, I32) if spec.integer else value

    if spec.padded:
        with kb.loop(plane_h * plane_w, name="z") as z:
            kb.store(ir.Constant(acc_ty, 0), kb["plane"], z)
    with kb.loop(g.batch, name="n") as image, kb.loop(g.out_channels, name="o") as out_channel:
        channel = b.sdiv(out_channel, kb.i64(multiplier)) if multiplier > 1 else out_channel
        x_plane = kb.idx((image, g.channels * g.height * g.width), (channel, g.height * g.width))
        if spec.padded:
            source, source_base, source_ty, row_pitch = kb["plane"], kb.i64(0), acc_ty, plane_w
            with kb.loop(g.height, name="ih") as ih, kb.loop(g.width, name="iw") as iw:
                value = widen(kb.load(kb["x"], kb.idx(x_plane, (ih, g.width), iw), x_ty))
                kb.store(value, kb["plane"], kb.idx((ih, plane_w), (g.pads[0] * plane_w + g.pads[1]), iw))
        else:
            source, source_base, source_ty, row_pitch = kb["x"], x_plane, x_ty, g.width
        weights = [kb.load(kb["w"], kb.idx((out_channel, taps), tap), acc_ty) for tap in range(taps)]
        start = kb.load(kb["bias"], out_channel, acc_ty) if spec.has_bias else ir.Constant(acc_ty, 0)
        y_plane = kb.idx((image, g.out_channels * g.positions), (out_channel, g.positions))
        with kb.loop(g.out_h, name="oh") as oh:
            row0 = kb.idx(source_base, (oh, g.stride[0] * row_pitch))
            with kb.loop(g.out_w, name="ow") as ow:
                column0 = kb.idx(row0, (ow, g.stride[1]))
                acc = start
                for kh in range(g.kernel_h):
                    for kw in range(g.kernel_w):
                        at = kb.idx(column0, kh * g.dilation[0] * row_pitch + kw * g.dilation[1])
                        value = kb.load(source, at, source_ty)
                        value = widen(value) if source_ty != acc_ty else value
                        acc = kb.multiply_add(weights[kh * g.kernel_w + kw], value, acc)
                if spec.requant is not None:
                    acc = requantise(kb, acc, spec.requant)
                kb.store(acc, kb["y"], kb.idx(y_plane, (oh, g.out_w), ow))
    return kb.finish()


def conv2d_depthwise(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, geometry: ConvGeometry,
                     requant: Requant | None) -> np.ndarray:
    """Depthwise (and channel-multiplier) convolution; inputs already validated."""
    integer = x.dtype == checks.INT8
    spec = DepthwiseKernel(geometry, integer, bias is not None, requant)
    kernel = get_kernel(KernelKey("conv2d_depthwise", (spec,)), lambda: _build_depthwise(spec), OP)
    acc_dtype = np.int32 if integer else np.float32
    weights = w.astype(acc_dtype, copy=False)
    plane_h, plane_w = spec.plane_shape
    plane = buffers.empty(plane_h * plane_w if spec.padded else 1, acc_dtype)
    out_dtype = checks.result_dtype(integer, requant)
    y = buffers.empty((geometry.batch, geometry.out_channels, geometry.out_h, geometry.out_w), out_dtype)
    bias_arg = bias if bias is not None else plane
    kernel(pointer(x), pointer(weights), pointer(bias_arg), pointer(y), pointer(plane))
    return y
