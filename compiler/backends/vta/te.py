"""Tensor expressions: what an operator computes, as affine maps over named axes.

An operator is a `ComputeDef`: a set of axes (spatial or reduction), the DRAM
tensors it touches (in the accelerator's packed layouts, counted in elements)
and how each is indexed.  Every operator has the same shape of computation,
which is the accelerator's:

    acc = init tensor, or 0
    acc += sum over the reduction axes of data x weight^T     (reduce="gemm")
    acc  = max over the reduction axes of data                (reduce="max")
    acc  = step(acc) for each ALU step (bias, shift, clip...)
    out  = acc truncated to the output width (or four byte planes for int32)

Schedules (schedule.py) say how to tile and place this; lowering turns the pair
into instructions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.affine import Affine
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp, MemId
from vtakit.isa.arith import ceil_div

ACC_MIN_IMM = -(1 << 15)  # the most negative ALU immediate: "minus infinity" for int8 data


@dataclass(frozen=True)
class Axis:
    name: str
    extent: int
    reduce: bool = False


@dataclass(frozen=True)
class Tensor:
    """A tensor in DRAM: a grid of elements of one memory type, row-major."""

    name: str
    shape: tuple[int, ...]
    mem: MemId
    pad: str = "zero"
    """What reads outside the grid see: "zero", "min" (for max reductions) or "error"."""


@dataclass(frozen=True)
class Access:
    tensor: Tensor
    index: tuple[Affine, ...]


@dataclass(frozen=True)
class AluStep:
    op: AluOp
    imm: int | None = None
    operand: Access | None = None


@dataclass(frozen=True)
class PoolWindow:
    """A square max pool (kernel, stride, symmetric pad) applied to an output tile on chip before its
    store (a conv -> max pool fused by passes/fusion.py; lowering/pool.py): padding never wins."""

    kernel: int
    stride: int
    pad: int = 0

    def out_size(self, n: int) -> int:
        return (n + 2 * self.pad - self.kernel) // self.stride + 1

    def first(self, i: int) -> int:
        """The first input index window `i` covers (negative: padding)."""
        return self.stride * i - self.pad

    def valid(self, i: int, n: int) -> range:
        """The input indices window `i` reads inside an extent `n`."""
        return range(max(0, self.first(i)), min(n, self.first(i) + self.kernel))

    def outputs(self, d: int, n: int) -> range:
        """The windows whose tap `d` (0 <= d < kernel) lands inside an extent `n`."""
        s, shift = self.stride, self.pad - d          # index = s * i - shift
        lo = max(0, -(-shift // s))
        return range(lo, max(lo, min(self.out_size(n), (n - 1 + shift) // s + 1)))


@dataclass(frozen=True)
class ComputeDef:
    name: str
    axes: tuple[Axis, ...]
    out: Access
    reduce: str = "none"
    data: Access | None = None
    weight: Access | None = None
    init: Access | None = None
    steps: tuple[AluStep, ...] = ()
    out_planes: int = 1
    """1: acc truncated to out_bits; 4: the full int32 accumulator as four byte planes."""
    pool: PoolWindow | None = None
    """A max pool over (oh, ow) of the finished tile; "out" in DRAM is then the pooled tensor."""
    residual_bits: int = 0
    """A fused residual operand enters the sum times 2**residual_bits (quant/techniques/wide_residual.py): the
    identity GEMM's diagonal (lowering/move.py)."""

    def __post_init__(self) -> None:
        names = [a.name for a in self.axes]
        if len(set(names)) != len(names):
            raise CompileError("duplicate axis names", op=self.name)
        known = set(names)
        reduce_axes = {a.name for a in self.axes if a.reduce}
        for acc in self.accesses():
            if len(acc.index) != len(acc.tensor.shape):
                raise CompileError(f"tensor {acc.tensor.name!r} has {len(acc.tensor.shape)} dims, "
                                   f"indexed with {len(acc.index)}", op=self.name)
            for e in acc.index:
                missing = set(e.vars) - known
                if missing:
                    raise CompileError(f"index of {acc.tensor.name!r} uses unknown axis "
                                       f"{sorted(missing)[0]!r}", op=self.name)
        used = {v for e in self.out.index for v in e.vars}
        if used & reduce_axes:
            raise CompileError("the output is indexed by a reduction axis", op=self.name)
        if self.reduce not in ("none", "gemm", "max"):
            raise CompileError(f"unknown reduction {self.reduce!r}", op=self.name)
        if (self.reduce == "gemm") != (self.weight is not None):
            raise CompileError("a GEMM reduction needs data and weight tensors", op=self.name)

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise CompileError(f"no axis {name!r} (axes: {', '.join(a.name for a in self.axes)})",
                           op=self.name)

    def accesses(self) -> list[Access]:
        found = [self.out] + [a for a in (self.data, self.weight, self.init) if a is not None]
        return found + [s.operand for s in self.steps if s.operand is not None]

    def tensors(self) -> dict[str, Tensor]:
        return {a.tensor.name: a.tensor for a in self.accesses()}


# ----------------------------------------------------------- operator shapes
IDENTITY_BITS = 6
"""The most a fused residual operand may be scaled (2**k on the identity GEMM's diagonal: an int8 weight)."""


def move_reason(cfg: HwConfig) -> str | None:
    """Why int8 operands cannot reach the accumulator on `cfg` (None if they can): by LOAD.ACC8, or without
    it (VTA) by an INP load and an identity GEMM (lowering/move.py), which needs block_in == block_out."""
    if cfg.acc8_load or (cfg.block_in == cfg.block_out and cfg.inp_bits == 8 and cfg.wgt_bits == 8):
        return None
    return (f"int8 operands reach the accumulator only by LOAD.ACC8 or an identity GEMM: config {cfg.label} has "
            f"no LOAD.ACC8 (acc8_load is false), and the identity GEMM needs block_in == block_out and 8-bit "
            f"inputs and weights (block_in {cfg.block_in}, block_out {cfg.block_out}, inp_bits {cfg.inp_bits}, "
            f"wgt_bits {cfg.wgt_bits})")


def _need_acc8(cfg: HwConfig, name: str) -> None:
    """int8 operands reach the accumulator by LOAD.ACC8 or, without it (VTA), an identity GEMM."""
    reason = move_reason(cfg)
    if reason:
        raise CompileError(reason, op=name)


def _shifts(cfg: HwConfig, shift: int) -> list[AluStep]:
    """Immediate SHRs by `shift` in all: one SHR expresses at most cfg.shr_max (15 on VTA, whose
    5-bit amount reads 16 as -16, a left shift), and arithmetic right shifts compose."""
    steps = []
    while shift > 0:
        steps.append(AluStep(AluOp.SHR, imm=min(shift, cfg.shr_max)))
        shift -= cfg.shr_max
    return steps


def epilogue(cfg: HwConfig, bias: Access | None, shift: int | None,
             clip: tuple[int, int] | None, channel_shift: Access | None = None,
             multiplier: Access | None = None, pre_shift: int = 0) -> tuple[AluStep, ...]:
    """acc + bias, [>> pre_shift, times the per-channel multiplier vector,] >> shift, >> the
    per-channel shift vector (if any), then clip as MIN then MAX (ISA.md's clip).

    Right shifts compose, which is why a per-channel shift can be an immediate common part then
    a vector part; the multiplier (ALU MUL, quant/techniques/fixed_point.py) comes between the pre-shift, which
    keeps its int32 product from wrapping, and the shifts that complete the fixed-point scale.
    """
    steps = []
    if bias is not None:
        steps.append(AluStep(AluOp.ADD, operand=bias))
    if multiplier is not None:
        if not cfg.alu_mul:
            raise CompileError(f"per-channel multipliers need the ALU MUL: config {cfg.label} has none "
                               f"(alu_mul is false)")
        steps += _shifts(cfg, pre_shift)
        steps.append(AluStep(AluOp.MUL, operand=multiplier))
    steps += _shifts(cfg, shift or 0)
    if channel_shift is not None:
        steps.append(AluStep(AluOp.SHR, operand=channel_shift))
    if clip is not None:
        lo, hi = clip
        steps += [AluStep(AluOp.MIN, imm=hi), AluStep(AluOp.MAX, imm=lo)]
    return tuple(steps)


def drop_idle_clips(steps: tuple[AluStep, ...], bounds: tuple[int, int]) -> tuple[AluStep, ...]:
    """`steps` without the immediate MIN/MAX that cannot change a value lying within `bounds` on entry.

    The bounds follow the values through immediate right shifts and the clips kept; from the first
    step of another kind on, everything is kept.  Why: a fused residual add's second clip is often
    idle (int8 + int8 shifted right by one or more already fits int8), and each ALU pass costs a
    compute cycle per output entry."""
    lo, hi = bounds
    kept: list[AluStep] = []
    for i, step in enumerate(steps):
        if step.operand is not None or step.op not in (AluOp.SHR, AluOp.MIN, AluOp.MAX) \
                or (step.op is AluOp.SHR and step.imm < 0):
            return tuple(kept) + tuple(steps[i:])
        if step.op is AluOp.SHR:
            lo, hi = lo >> step.imm, hi >> step.imm
        elif step.op is AluOp.MIN:
            if hi <= step.imm:
                continue
            lo, hi = min(lo, step.imm), step.imm
        else:
            if lo >= step.imm:
                continue
            lo, hi = step.imm, max(hi, step.imm)
        kept.append(step)
    return tuple(kept)


def _apply(steps: tuple[AluStep, ...], x: int) -> int:
    """One value through immediate SHR/MIN/MAX steps."""
    for step in steps:
        x = x >> step.imm if step.op is AluOp.SHR else min(x, step.imm) if step.op is AluOp.MIN else max(x, step.imm)
    return x


def drop_masked_bounds(steps: tuple[AluStep, ...], tail: tuple[AluStep, ...],
                       magnitude: int) -> tuple[tuple[AluStep, ...], tuple[int, int]]:
    """A convolution epilogue ending in a clip (MIN hi, MAX lo) whose int8 result gets an int8
    residual added and then `tail` (immediate SHR/MIN/MAX): the clip bounds the tail makes
    idle dropped, and the bounds of the value entering the add (its clip's, or +-`magnitude`, the
    most the value entering the clip can be).

    Why: the sum's own clip often masks one of the first clip's bounds (clip to -128, add int8,
    clip to 0: anything at or below -128 + 127 ends at 0 either way, and the tail is monotone),
    and each ALU pass costs a compute cycle per output entry.  Only where the unclipped value plus
    the residual cannot wrap int32."""
    lo_in, hi_in = -magnitude, magnitude
    hi, lo = steps[-2].imm, steps[-1].imm
    if magnitude + 128 >= 2**31 or any(s.operand is not None or s.op not in (AluOp.SHR, AluOp.MIN, AluOp.MAX)
                          or (s.op is AluOp.SHR and s.imm < 0) for s in tail):
        return steps, (lo - 128, hi + 127)
    keep_max = _apply(tail, lo + 127) != _apply(tail, lo_in - 128)
    keep_min = _apply(tail, hi - 128) != _apply(tail, hi_in + 127)
    bounds = ((lo if keep_max else lo_in) - 128, (hi if keep_min else hi_in) + 127)
    return steps[:-2] + steps[-2:-1] * keep_min + steps[-1:] * keep_max, bounds


Padding = int | tuple[int, int, int, int]
"""One pad for every side, or (top, left, bottom, right)."""


def pads4(pad: Padding) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) of a padding."""
    return (int(pad),) * 4 if isinstance(pad, (int, np.integer)) else tuple(int(p) for p in pad)


def conv2d_def(cfg: HwConfig, *, n: int, c_in: int, h: int, w: int, c_out: int, kh: int, kw: int,
               stride: int = 1, pad: Padding = 0, bias: bool = False, shift: int | None = None,
               clip: tuple[int, int] | None = None, residual: tuple | None = None,
               channel_shift: bool = False, bias_gemm: bool = False, pool: PoolWindow | None = None,
               multiplier: bool = False, pre_shift: int = 0, name: str = "conv2d") -> ComputeDef:
    """Convolution in NCHW{batch}n{block}c x OIHW{block}o{block}i layouts.

    `residual` = (shift, clip) fuses the residual add that reads this convolution's int8 result:
    after the requantizing epilogue the int8 tensor "res" is added to the tile, shifted and clipped
    again (the QAdd's semantics), so the sum leaves in the convolution's one store; (shift, clip, k):
    the convolution's `clip` is dropped, its wide result plus "res" << k (quant/techniques/wide_residual.py).  With
    `channel_shift` the epilogue also shifts each output channel right by its entry of the int32
    `shift` vector (laid out like the bias; see `split_channel_shift`); with `multiplier` it shifts by
    `pre_shift` and multiplies by the int32 vector `mult` first (quant/techniques/fixed_point.py).  With `bias_gemm` the bias is
    a WGT tensor of digit blocks added by a GEMM (`lowering/bias.py`), not an acc vector.  Asymmetric
    `pad` (top, left, bottom, right): reads past the bottom and right edges see zeros (DMA padding) like
    the others.  `pool` max-pools the finished int8 tile on chip (lowering/pool.py): "out" is then the
    pooled tensor in DRAM."""
    top, left, bottom, right = pads4(pad)
    oh, ow = (h + top + bottom - kh) // stride + 1, (w + left + right - kw) // stride + 1
    if oh < 1 or ow < 1:
        raise CompileError(f"kernel {kh}x{kw} with padding {pad} does not fit a {h}x{w} input", op=name)
    nb, icb, ocb = ceil_div(n, cfg.batch), ceil_div(c_in, cfg.block_in), ceil_div(c_out, cfg.block_out)
    axes = (Axis("n", nb), Axis("oc", ocb), Axis("oh", oh), Axis("ow", ow),
            Axis("ic", icb, True), Axis("kh", kh, True), Axis("kw", kw, True))
    v = Affine.var
    data = Access(Tensor("data", (nb, icb, h, w), MemId.INP),
                  (v("n"), v("ic"), v("oh", stride) + v("kh") - top, v("ow", stride) + v("kw") - left))
    weight = Access(Tensor("weight", (ocb, icb, kh, kw), MemId.WGT, pad="error"),
                    (v("oc"), v("ic"), v("kh"), v("kw")))
    bias_mem = MemId.WGT if bias_gemm else MemId.ACC
    bias_acc = Access(Tensor("bias", (ocb,), bias_mem, pad="error"), (v("oc"),)) if bias else None
    shift_acc = Access(Tensor("shift", (ocb,), MemId.ACC, pad="error"), (v("oc"),)) if channel_shift else None
    mult_acc = Access(Tensor("mult", (ocb,), MemId.ACC, pad="error"), (v("oc"),)) if multiplier else None
    requant = shift is not None or clip is not None or channel_shift or multiplier
    out_index = (v("n"), v("oc"), v("oh"), v("ow"))
    out = Access(Tensor("out", (nb, ocb, oh, ow), MemId.OUT, pad="error"), out_index)
    if residual is not None and len(residual) > 2:
        clip = None  # a wide convolution: its result enters the sum unclipped (quant/techniques/wide_residual.py)
    steps = epilogue(cfg, bias_acc, shift, clip, shift_acc, mult_acc, pre_shift)
    if residual is not None:
        if not requant:
            raise CompileError("a fused residual add needs the convolution's int8 result (a shift or clip)", op=name)
        _need_acc8(cfg, name)
        bits = int(residual[2]) if len(residual) > 2 else 0
        if bits and not (not cfg.acc8_load and 0 < bits <= IDENTITY_BITS):
            raise CompileError(f"a residual operand scaled by 2**{bits} needs the identity GEMM (no LOAD.ACC8) and "
                               f"at most 2**{IDENTITY_BITS}: config {cfg.label}", op=name)
        res = Access(Tensor("res", (nb, ocb, oh, ow), MemId.ACC_8BIT, pad="error"), out_index)
        tail = epilogue(cfg, None, residual[0], residual[1])
        bounds = (-2**31, 2**31 - 1)
        if clip is not None:   # the sum of two int8 tensors: a clip bound the shifted sum cannot pass is dropped
            # |the value entering the clip|: int8 products of the reduction (and of the bias GEMM's one
            # block), or any int32 after an ALU bias add, shifted right by the immediate shifts
            # (any int32 after a multiplier, shifted right by the immediate shifts after it)
            products = (icb * kh * kw + bias_gemm) * cfg.block_in
            wide = 2**31 if (bias and not bias_gemm) or multiplier else min(2**31, products * 2**14)
            after = [s for s in steps if s.op is AluOp.MUL][-1:]
            later = steps[steps.index(after[0]) + 1:] if after else steps
            steps, bounds = drop_masked_bounds(steps, tail, wide >> sum(s.imm for s in later if s.op is AluOp.SHR
                                                                          and s.operand is None))
            tail = drop_idle_clips(tail, bounds)
        steps += (AluStep(AluOp.ADD, operand=res),) + tail
    if pool is not None:
        if not requant:
            raise CompileError("a fused max pool needs the convolution's int8 result (a shift or clip)", op=name)
        if not (pool.kernel >= 1 and pool.stride >= 1 and 0 <= pool.pad < pool.kernel):
            raise CompileError(f"fused max pool: kernel {pool.kernel}, stride {pool.stride}, pad {pool.pad} "
                               f"(need kernel, stride >= 1 and 0 <= pad < kernel)", op=name)
        if pool.out_size(oh) < 1 or pool.out_size(ow) < 1:
            raise CompileError(f"fused max pool window {pool.kernel} with padding {pool.pad} does not fit the "
                               f"{oh}x{ow} convolution output", op=name)
    return ComputeDef(name, axes, out, reduce="gemm", data=data, weight=weight, steps=steps,
                      out_planes=1 if requant else 4, pool=pool,
                      residual_bits=int(residual[2]) if residual is not None and len(residual) > 2 else 0)


def split_channel_shift(cfg: HwConfig, shifts, name: str) -> tuple[int, np.ndarray]:
    """Per-output-channel right shifts as (an immediate common part, an int32 vector of the rest).

    The vector part is read by one SHR with a tensor operand, whose amount is the operand's low
    `cfg.shr_arg_bits` bits read as signed: each entry must lie in 0..cfg.shr_max, so the shifts
    may spread over at most shr_max (15 on VTA); the common part may be any size (several SHRs)."""
    s = np.asarray(shifts)
    if s.ndim != 1 or not s.size or not np.issubdtype(s.dtype, np.integer):
        raise CompileError(f"a per-channel shift must be a non-empty 1-D integer array, got {s.dtype} "
                           f"shape {s.shape}", op=name)
    lo, hi = int(s.min()), int(s.max())
    if lo < 0 or hi >= 32:
        raise CompileError(f"per-channel shifts must lie in [0, 32), got {lo}..{hi}", op=name)
    if hi - lo > cfg.shr_max:
        raise CompileError(f"per-channel shifts spread over {lo}..{hi}: one SHR of a vector expresses at most "
                           f"{cfg.shr_max} between channels on {cfg.label}", op=name)
    base = max(0, hi - cfg.shr_max)
    return base, (s - base).astype(np.int32)


def eltwise_def(cfg: HwConfig, kind: str, *, n: int, c: int, h: int, w: int, shift: int | None = None,
                clip: tuple[int, int] | None = None, multiplier: int | None = None,
                name: str | None = None) -> ComputeDef:
    """add (two int8 tensors), relu (int8), requantize (int32 -> int8, optionally times a
    multiplier first: the ALU's MUL) on NCHW{b}n{block_out}c."""
    name = name or kind
    if kind in ("add", "relu"):
        _need_acc8(cfg, name)
    nb, cb = ceil_div(n, cfg.batch), ceil_div(c, cfg.block_out)
    axes = (Axis("n", nb), Axis("c", cb), Axis("h", h), Axis("w", w))
    idx = tuple(Affine.var(a.name) for a in axes)
    shape = (nb, cb, h, w)
    out = Access(Tensor("out", shape, MemId.OUT, pad="error"), idx)
    if kind == "add":
        a = Access(Tensor("a", shape, MemId.ACC_8BIT, pad="error"), idx)
        b = Access(Tensor("b", shape, MemId.ACC_8BIT, pad="error"), idx)
        steps = (AluStep(AluOp.ADD, operand=b),) + epilogue(cfg, None, shift, clip)
        return ComputeDef(name, axes, out, init=a, steps=steps)
    if kind == "relu":
        a = Access(Tensor("a", shape, MemId.ACC_8BIT, pad="error"), idx)
        return ComputeDef(name, axes, out, init=a, steps=(AluStep(AluOp.MAX, imm=0),))
    if kind == "requantize":
        x = Access(Tensor("a", shape, MemId.ACC, pad="error"), idx)
        scale: tuple[AluStep, ...] = ()
        if multiplier is not None and multiplier != 1:
            if not cfg.alu_mul:
                raise CompileError(f"config {cfg.label} has no ALU MUL (alu_mul is false)", op=name)
            if not ACC_MIN_IMM <= multiplier < -ACC_MIN_IMM:
                raise CompileError(f"multiplier {multiplier} does not fit the 16-bit ALU immediate", op=name)
            scale = (AluStep(AluOp.MUL, imm=multiplier),)
        return ComputeDef(name, axes, out, init=x, steps=scale + epilogue(cfg, None, shift, clip or (-128, 127)))
    raise CompileError(f"unknown elementwise operation {kind!r}", op=name)


def maxpool_def(cfg: HwConfig, *, n: int, c: int, h: int, w: int, kernel: int, stride: int,
                pad: int = 0, name: str = "max_pool2d") -> ComputeDef:
    """Max pooling of int8 NCHW{b}n{block_out}c; padding never wins (it reads as minus infinity)."""
    _need_acc8(cfg, name)
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    if oh < 1 or ow < 1:
        raise CompileError(f"window {kernel} with padding {pad} does not fit a {h}x{w} input", op=name)
    nb, cb = ceil_div(n, cfg.batch), ceil_div(c, cfg.block_out)
    axes = (Axis("n", nb), Axis("c", cb), Axis("oh", oh), Axis("ow", ow),
            Axis("kh", kernel, True), Axis("kw", kernel, True))
    v = Affine.var
    data = Access(Tensor("data", (nb, cb, h, w), MemId.ACC_8BIT, pad="min"),
                  (v("n"), v("c"), v("oh", stride) + v("kh") - pad, v("ow", stride) + v("kw") - pad))
    out = Access(Tensor("out", (nb, cb, oh, ow), MemId.OUT, pad="error"),
                 (v("n"), v("c"), v("oh"), v("ow")))
    return ComputeDef(name, axes, out, reduce="max", data=data)
