"""conv2d: panel-wise im2col feeding the register-blocked GEMM; depthwise goes elsewhere.

For each image and group, output positions are cut into panels of
`tile.columns`; a panel's im2col block (K x columns, K = C/groups * KH * KW) is
written to a small scratch buffer that stays in cache, and the GEMM tile walks
all output channels over it.  Padding, stride and dilation only affect the
im2col step, which precomputes each column's input row/column once per panel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.cpu import buffers

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Requant
from vtakit.compiler.backends.cpu.depthwise import conv2d_depthwise
from vtakit.compiler.backends.cpu.gemm import PanelSpec, Tile, default_tile, emit_panel
from vtakit.compiler.backends.host.conv import OP, ConvGeometry, conv_operands
from vtakit.compiler.backends.cpu.irgen import requantise
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32, I64, KernelBuilder, pointer
from vtakit.compiler.backends.cpu.jit import KernelKey, get_kernel
from vtakit.errors import pc_side_missing

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)


@dataclass(frozen=True)
class ConvKernel:
    geometry: ConvGeometry
    integer: bool              # int8 inputs, int32 accumulation
    has_bias: bool
    requant: Requant | None    # int8 output (None: int32 or float32 output)
    tile: Tile


def _emit_im2col(kb: KernelBuilder, spec: ConvKernel, image: ir.Value, group: ir.Value, panel: ir.Value,
                 rows: ir.Value, cols: ir.Value) -> None:
    """scratch[k, j] = x[n, g*Cg + c, ih, iw] (0 outside) for k = (c, kh, kw), j in the panel."""
    g = spec.geometry
    b = kb.b
    width = spec.tile.columns
    elem = I32 if spec.integer else F32
    x_elem = I8 if spec.integer else F32
    far = -(1 << 40)  # an input row no window reaches: marks columns past the last position
    with kb.loop(width, name="j") as j:
        position = kb.idx((panel, width), j)
        oh = b.sdiv(position, kb.i64(g.out_w))
        ow = kb.idx(position, (oh, -g.out_w))
        valid = b.icmp_signed("<", position, kb.i64(g.positions))
        first_row = kb.idx((oh, g.stride[0]), -g.pads[0])
        kb.store(b.select(valid, first_row, kb.i64(far)), rows, j)
        kb.store(kb.idx((ow, g.stride[1]), -g.pads[1]), cols, j)
    image_base = kb.idx((image, g.channels * g.height * g.width), (group, g.group_in * g.height * g.width))
    with kb.loop(g.group_in, name="c") as c:
        plane = kb.idx(image_base, (c, g.height * g.width))
        with kb.loop(g.kernel_h, name="kh") as kh, kb.loop(g.kernel_w, name="kw") as kw:
            k = kb.idx((c, g.kernel_h * g.kernel_w), (kh, g.kernel_w), kw)
            with kb.loop(width, name="j") as j:
                ih = kb.idx(kb.load(rows, j, I64), (kh, g.dilation[0]))
                iw = kb.idx(kb.load(cols, j, I64), (kw, g.dilation[1]))
                inside = b.and_(b.icmp_unsigned("<", ih, kb.i64(g.height)),
                                b.icmp_unsigned("<", iw, kb.i64(g.width)))
                offset = b.select(inside, kb.idx((ih, g.width), iw), kb.i64(0))
                value = kb.load(kb["x"], kb.idx(plane, offset), x_elem)
                if spec.integer:
                    value = b.sext(value, I32)
                value = b.select(inside, value, ir.Constant(elem, 0))
                kb.store(value, kb["scratch"], kb.idx((k, width), j))


def _build_conv(spec: ConvKernel):
    g, tile = spec.geometry, spec.tile
    elem = I32 if spec.integer else F32
    kb = KernelBuilder("conv2d", ["x", "w", "bias", "y", "scratch"])
    rows = kb.array(I64, tile.columns)  # first input row / column of each panel column's window
    cols = kb.array(I64, tile.columns)
    def epilogue(acc: ir.Value, m: ir.Value) -> ir.Value:
        return acc if spec.requant is None else requantise(kb, acc, spec.requant)

    with kb.loop(g.batch, name="n") as image, kb.loop(g.groups, name="g") as group:
        first_out = kb.idx((group, g.group_out))

        def bias(m: ir.Value) -> ir.Value | None:
            return kb.load(kb["bias"], kb.idx(first_out, m), elem) if spec.has_bias else None

        def panel(index: ir.Value, columns: int) -> None:
            _emit_im2col(kb, spec, image, group, index, rows, cols)
            out_base = kb.idx((image, g.out_channels * g.positions), (first_out, g.positions),
                              (index, tile.columns))
            panel_spec = PanelSpec(
                elem=elem, rows=g.group_out, depth=g.reduction,
                a=kb["w"], a_row=lambda m: kb.idx((first_out, g.reduction), (m, g.reduction)),
                b=kb["scratch"], b_base=0, b_stride=tile.columns, b_exact=True,
                c=kb["y"], c_row=lambda m: kb.idx(out_base, (m, g.positions)),
                init=bias, epilogue=epilogue)
            emit_panel(kb, tile, panel_spec, columns)

        full_panels = g.positions // tile.columns
        if full_panels:
            with kb.loop(full_panels, name="panel") as index:
                panel(index, tile.columns)
        if g.positions % tile.columns:
            panel(kb.i64(full_panels), g.positions % tile.columns)
    return kb.finish()


def conv2d_generic(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, geometry: ConvGeometry,
                   requant: Requant | None) -> np.ndarray:
    """Any groups/stride/pads/dilation through im2col + GEMM (inputs already validated)."""
    integer = x.dtype == checks.INT8
    tile = default_tile()
    spec = ConvKernel(geometry, integer, bias is not None, requant, tile)
    kernel = get_kernel(KernelKey(OP, (spec,)), lambda: _build_conv(spec), OP)
    acc_dtype = np.int32 if integer else np.float32
    weights = w.astype(acc_dtype, copy=False)
    scratch = buffers.empty(geometry.reduction * tile.columns, acc_dtype)
    out_dtype = checks.result_dtype(integer, requant)
    y = buffers.empty((geometry.batch, geometry.out_channels, geometry.out_h, geometry.out_w), out_dtype)
    bias_arg = bias if bias is not None else scratch
    kernel(pointer(x), pointer(weights), pointer(bias_arg), pointer(y), pointer(scratch))
    return y


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, stride=(1, 1), pads=(0, 0, 0, 0),
           dilation=(1, 1), groups: int = 1, shift: int | None = None,
           clip: tuple[int, int] | None = None) -> np.ndarray:
    """NCHW x (*) OIHW w, ONNX Conv semantics; int8 in -> int32 out, or int8 with shift/clip.

    pads are (top, left, bottom, right).  Depthwise convolutions (groups equal to
    the input channels) take a dedicated kernel that vectorises along output width.
    """
    checked = conv_operands(x, w, bias, stride, pads, dilation, groups, shift, clip)
    if checked.geometry.group_in == 1 and checked.geometry.groups > 1:
        return conv2d_depthwise(checked.x, checked.w, checked.bias, checked.geometry, checked.requant)
    return conv2d_generic(checked.x, checked.w, checked.bias, checked.geometry, checked.requant)
