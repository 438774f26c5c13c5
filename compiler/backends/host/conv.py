"""conv2d as the host backends see it: the validated geometry every conv kernel is specialised on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Checker, Requant
from vtakit.errors import CompileError

OP = "conv2d"


@dataclass(frozen=True)
class ConvGeometry:
    """Every shape and window parameter a conv kernel is specialised on."""

    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int
    out_h: int
    out_w: int

    @property
    def group_in(self) -> int:
        return self.channels // self.groups

    @property
    def group_out(self) -> int:
        return self.out_channels // self.groups

    @property
    def reduction(self) -> int:
        return self.group_in * self.kernel_h * self.kernel_w

    @property
    def positions(self) -> int:
        return self.out_h * self.out_w


def conv_geometry(x: np.ndarray, w: np.ndarray, stride, pads, dilation, groups) -> ConvGeometry:
    """Validated geometry for NCHW x and OIHW w (raises CompileError naming the problem)."""
    stride = checks.ints(stride, 2, "stride", OP, 1)
    pads = checks.ints(pads, 4, "pads", OP, 0)
    dilation = checks.ints(dilation, 2, "dilation", OP, 1)
    groups = checks.integer(groups, "groups", OP, 1, 1 << 30)
    n, c, h, width = x.shape
    o, c_per_group, kh, kw = w.shape
    if c % groups or o % groups:
        raise CompileError(f"groups={groups} must divide input channels {c} and output channels {o}", op=OP)
    if c_per_group != c // groups:
        raise CompileError(f"weight expects {c_per_group} channels per group, input has {c} / {groups} groups", op=OP)
    out_h = checks.out_size(h, kh, stride[0], pads[0], pads[2], dilation[0])
    out_w = checks.out_size(width, kw, stride[1], pads[1], pads[3], dilation[1])
    if out_h < 1 or out_w < 1:
        raise CompileError(f"window {kh}x{kw} (dilation {dilation}) does not fit input {h}x{width} with pads {pads}",
                           op=OP)
    return ConvGeometry(n, c, h, width, o, kh, kw, stride, pads, dilation, groups, out_h, out_w)


@dataclass(frozen=True)
class ConvOperands:
    """A checked conv2d call: its operands (as the backend's `checked` returned them) and what they imply."""

    x: Any
    w: Any
    bias: Any                  # None without a bias
    integer: bool              # int8 operands, int32 accumulation
    requant: Requant | None    # int8 output (None: int32 or float32 output)
    geometry: ConvGeometry

    @property
    def out_dtype(self) -> np.dtype:
        return checks.result_dtype(self.integer, self.requant)


def conv_operands(x, w, bias, stride, pads, dilation, groups, shift, clip,
                  checked: Checker = checks.array) -> ConvOperands:
    """Every check of a conv2d call, in the order all backends raise them (operands, requant, geometry)."""
    x, w, integer = checks.weighted(x, w, OP, 4, checked)
    bias = checks.bias_vector(bias, integer, w.shape[0], "output channels", OP, checked)
    requant = checks.int8_requant(shift, clip, integer, "convolutions", OP)
    return ConvOperands(x, w, bias, integer, requant, conv_geometry(x, w, stride, pads, dilation, groups))
