"""Reduction packing: convolutions with few input channels rewritten so GEMM lanes carry real data.

A GEMM micro-op multiplies a whole block of `block_in` input channels; a convolution with 3
input channels (ResNet's first) pads 13 of every 16 lanes with zeros, for every kernel tap.  Two
rewrites give an equivalent convolution whose reduction packs densely:

- im2col: every output pixel's receptive field (C x KH x KW values) becomes the channels of a
  1x1 stride-1 convolution (7x7x3 = 147 -> 10 blocks instead of 49);
- space-to-depth: stride s folds s x s pixels into channels and the kernel shrinks to
  ceil(K/s) taps, stride 1 (3 -> 12 channels, 4x4 taps instead of 7x7).

Both are the same integer sums in another order, so results are bit-identical.  The transform
runs on the host, where the input is quantized and laid out anyway (a network's first
convolution reads its input from the host): it adds no host/accelerator crossing, only input
bytes, which the cost model counts.  `choose_packing` keeps whichever the default schedule's
cost model (`heuristics.conv_cost`) says is fastest, the unpacked convolution included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.compiler.backends.vta.heuristics import conv_cost, conv_shape, default_conv_knobs
from vtakit.compiler.backends.vta.te import Padding, pads4
from vtakit.errors import CompileError
from vtakit.isa.arith import ceil_div
from vtakit.isa.config import HwConfig

KINDS = ("none", "im2col", "space_to_depth")


@dataclass(frozen=True)
class ConvGeometry:
    """The shapes and window of one convolution (NCHW data, OIHW weights)."""

    x_shape: tuple[int, int, int, int]
    w_shape: tuple[int, int, int, int]
    stride: int
    padding: Padding

    @property
    def out_hw(self) -> tuple[int, int]:
        _, _, h, w = self.x_shape
        _, _, kh, kw = self.w_shape
        top, left, bottom, right = pads4(self.padding)
        return ((h + top + bottom - kh) // self.stride + 1, (w + left + right - kw) // self.stride + 1)


@dataclass(frozen=True)
class ReductionPacking:
    """How a convolution is rewritten (`kind`), and the equivalent convolution the accelerator runs.

    `bias_lanes` > 0: the bias rides in that many otherwise idle lanes of the last input-channel
    block (constant input channels, the bias's digits as their weights at tap (0, 0)), so the
    accelerator's epilogue has no bias pass; `packed` then counts those channels."""

    kind: str
    original: ConvGeometry
    packed: ConvGeometry
    bias_lanes: int = 0

    @property
    def label(self) -> str:
        return self.kind + ("+bias" if self.bias_lanes else "")

    def to_spec(self) -> str:
        """A one-line text form (module manifests, buffer keys); `from_spec` reads it back."""
        g = self.original
        pads = (g.padding,) if isinstance(g.padding, (int, np.integer)) else tuple(g.padding)
        dims = ",".join(map(str, g.x_shape + g.w_shape + (g.stride, *pads, self.bias_lanes)))
        return f"{self.kind}/{dims}"

    @classmethod
    def from_spec(cls, spec: str) -> "ReductionPacking":
        try:
            kind, dims = spec.split("/")
            v = tuple(int(d) for d in dims.split(","))
            if len(v) not in (11, 14):   # one padding, or top, left, bottom, right
                raise ValueError(spec)
            g = ConvGeometry(v[0:4], v[4:8], v[8], v[9] if len(v) == 11 else v[9:13])
            lanes = v[-1]
        except (ValueError, IndexError):
            raise CompileError(f"bad reduction packing spec {spec!r}") from None
        return _with_lanes(packing(kind, g), lanes)

    def input(self, x: np.ndarray) -> np.ndarray:
        """The packed convolution's data from the original's (host side, same dtype)."""
        data = self._data(x)
        if not self.bias_lanes:
            return data
        consts = np.broadcast_to(lane_inputs(self.bias_lanes).astype(x.dtype)[None, :, None, None],
                                 (data.shape[0], self.bias_lanes) + data.shape[2:])
        return np.ascontiguousarray(np.concatenate([data, consts], axis=1))

    def weight(self, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """The packed convolution's weights from the original's (OIHW), with the bias lanes."""
        taps = self._taps(w)
        if not self.bias_lanes:
            return taps
        digits = bias_digits(bias, self.bias_lanes)
        if digits is None:
            raise CompileError(f"bias does not fit {self.bias_lanes} lanes", op="conv2d")
        lanes = np.zeros((w.shape[0], self.bias_lanes) + taps.shape[2:], dtype=w.dtype)
        lanes[:, :, 0, 0] = digits
        return np.ascontiguousarray(np.concatenate([taps, lanes], axis=1))

    def _data(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "none":
            return x
        g, p = self.original, self.packed
        n, c, h, w = g.x_shape
        _, _, kh, kw = g.w_shape
        oh, ow = g.out_hw
        if self.kind == "im2col":
            top, left, bottom, right = pads4(g.padding)
            xp = _pad(x, g.padding, h + top + bottom, w + left + right)
            s = g.stride
            cols = [xp[:, :, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s]
                    for i in range(kh) for j in range(kw)]
            # channel index (c * kh + i) * kw + j, as w.reshape(o, c * kh * kw) orders the reduction
            return np.ascontiguousarray(np.stack(cols, axis=2).reshape(n, c * kh * kw, oh, ow))
        s = g.stride
        _, _, ph, pw = p.x_shape
        xp = _pad(x, g.padding, ph * s, pw * s)
        blocks = xp.reshape(n, c, ph, s, pw, s).transpose(0, 1, 3, 5, 2, 4)   # (n, c, a, b, ph, pw)
        return np.ascontiguousarray(blocks.reshape(n, c * s * s, ph, pw))

    def _taps(self, w: np.ndarray) -> np.ndarray:
        if self.kind == "none":
            return w
        o, c, kh, kw = self.original.w_shape
        if self.kind == "im2col":
            return np.ascontiguousarray(w.reshape(o, c * kh * kw, 1, 1))
        s = self.original.stride
        k2h, k2w = self.packed.w_shape[2:]
        wp = np.zeros((o, c, k2h * s, k2w * s), dtype=w.dtype)
        wp[:, :, :kh, :kw] = w
        taps = wp.reshape(o, c, k2h, s, k2w, s).transpose(0, 1, 3, 5, 2, 4)   # (o, c, a, b, i', j')
        return np.ascontiguousarray(taps.reshape(o, c * s * s, k2h, k2w))


_DIGIT = 127       # the input value of every bias lane but the first (whose input is 1)


def lane_inputs(lanes: int) -> np.ndarray:
    """The inputs of `lanes` bias lanes: 1, then 127 (`bias_digits` are their weights)."""
    return np.array([1] + [_DIGIT] * (lanes - 1), dtype=np.int64)


def bias_digits(bias: np.ndarray | None, lanes: int) -> np.ndarray | None:
    """(O, lanes) int8 weights w with sum(w * lane inputs) == bias exactly, or None if some bias
    needs more lanes (|bias| up to 63 + 127 * 127 * (lanes - 1))."""
    if bias is None or lanes < 2:
        return None
    b = bias.astype(np.int64)
    low = (b + _DIGIT // 2) % _DIGIT - _DIGIT // 2          # in [-63, 63]
    high = (b - low) // _DIGIT
    if np.any(np.abs(high) > 127 * (lanes - 1)):
        return None
    out = np.zeros((len(b), lanes), dtype=np.int64)
    out[:, 0] = low
    for lane in range(1, lanes):
        out[:, lane] = np.clip(high, -127, 127)
        high = high - out[:, lane]
    return out.astype(np.int8)


def _pad(x: np.ndarray, pad: Padding, rows: int, cols: int) -> np.ndarray:
    """x with the top and left `pad` zeros before its spatial axes, cut or zero-filled to rows x cols."""
    n, c, h, w = x.shape
    top, left = pads4(pad)[:2]
    out = np.zeros((n, c, rows, cols), dtype=x.dtype)
    hh, ww = min(h, rows - top), min(w, cols - left)
    out[:, :, top:top + hh, left:left + ww] = x[:, :, :hh, :ww]
    return out


def packing(kind: str, g: ConvGeometry) -> ReductionPacking:
    """The `kind` rewrite of convolution `g`; CompileError if it does not apply."""
    n, c, h, w = g.x_shape
    o, _, kh, kw = g.w_shape
    oh, ow = g.out_hw
    if kind == "none":
        return ReductionPacking(kind, g, g)
    if kind == "im2col":
        return ReductionPacking(kind, g, ConvGeometry((n, c * kh * kw, oh, ow), (o, c * kh * kw, 1, 1), 1, 0))
    if kind == "space_to_depth":
        s = g.stride
        if s < 2:
            raise CompileError("space-to-depth packing needs a stride of 2 or more", op="conv2d")
        k2h, k2w = ceil_div(kh, s), ceil_div(kw, s)
        packed = ConvGeometry((n, c * s * s, oh + k2h - 1, ow + k2w - 1), (o, c * s * s, k2h, k2w), 1, 0)
        return ReductionPacking(kind, g, packed)
    raise CompileError(f"unknown reduction packing {kind!r}; known: {', '.join(KINDS)}", op="conv2d")


def _reduction_blocks(cfg: HwConfig, g: ConvGeometry) -> int:
    """GEMM micro-ops per output block pair: input-channel blocks x kernel taps."""
    _, c, kh, kw = g.w_shape
    return ceil_div(c, cfg.block_in) * kh * kw


def candidates(cfg: HwConfig, g: ConvGeometry) -> list[ReductionPacking]:
    """The unpacked convolution and every rewrite that needs fewer reduction blocks than it."""
    out = [packing("none", g)]
    kinds = ["im2col"] + (["space_to_depth"] if g.stride > 1 else [])
    for kind in kinds:
        p = packing(kind, g)
        if g.w_shape[2] * g.w_shape[3] > 1 and _reduction_blocks(cfg, p.packed) < _reduction_blocks(cfg, g):
            out.append(p)
    return out


def with_bias_lanes(cfg: HwConfig, p: ReductionPacking, bias: np.ndarray | None) -> ReductionPacking:
    """`p` with its bias in the idle lanes of its last input block, where there are enough of them
    (two at least) and the bias fits; else `p`.  Only packed forms: their data has no padding, so
    a constant channel is constant at every tap."""
    if p.kind == "none" or bias is None:
        return p
    c = p.packed.x_shape[1]
    lanes = ceil_div(c, cfg.block_in) * cfg.block_in - c
    if lanes < 2 or bias_digits(bias, lanes) is None:
        return p
    return _with_lanes(p, lanes)


def _with_lanes(p: ReductionPacking, lanes: int) -> ReductionPacking:
    """`p` with `lanes` constant input channels after its data channels."""
    if not lanes:
        return p
    n, c, h, w = p.packed.x_shape
    o, _, kh, kw = p.packed.w_shape
    packed = ConvGeometry((n, c + lanes, h, w), (o, c + lanes, kh, kw), p.packed.stride, p.packed.padding)
    return ReductionPacking(p.kind, p.original, packed, lanes)


def cost_window(h: int, w: int, padding) -> tuple[int, int, int, str]:
    """(h, w, pad) as the cost model and the tuning key see an asymmetric padding: the padded input with
    no padding (the same output size), and the key's padding text."""
    top, left, bottom, right = pads4(padding)
    if top == left == bottom == right:
        return h, w, top, str(top)
    return h + top + bottom, w + left + right, 0, f"{top}_{left}_{bottom}_{right}"


def estimate(cfg: HwConfig, p: ReductionPacking, *, epilogue_ops: int, planes: int) -> float | None:
    """The cost model's cycles for the packed convolution under its default knobs (None: nothing fits).
    `epilogue_ops` counts the original's ALU passes; folded bias lanes remove one."""
    g = p.packed
    n, c, h, w = g.x_shape
    o, _, kh, kw = g.w_shape
    h, w, pad, _ = cost_window(h, w, g.padding)
    shape = conv_shape(cfg, n=n, c_in=c, h=h, w=w, c_out=o, kh=kh, kw=kw, stride=g.stride, pad=pad,
                       epilogue_ops=epilogue_ops - (1 if p.bias_lanes else 0), planes=planes)
    try:
        return conv_cost(cfg, shape, default_conv_knobs(cfg, shape))
    except CompileError:
        return None


def choose_packing(cfg: HwConfig, g: ConvGeometry, *, epilogue_ops: int, planes: int,
                   bias: np.ndarray | None = None) -> ReductionPacking:
    """The rewrite the cost model puts fastest ("none" unless a packing needs fewer reduction blocks);
    `bias` (the values) lets a packing carry it in idle lanes."""
    options = [with_bias_lanes(cfg, p, bias) for p in candidates(cfg, g)]
    if len(options) == 1:
        return options[0]
    scored = [(cost, i, p) for i, p in enumerate(options)
              if (cost := estimate(cfg, p, epilogue_ops=epilogue_ops, planes=planes)) is not None]
    return min(scored)[2] if scored else options[0]
