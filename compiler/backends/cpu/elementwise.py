"""Elementwise kernels with numpy broadcasting: one strided loop nest, many expressions.

Operands are described by element strides over the output shape (0 where an
operand is broadcast).  Dimensions that every operand walks contiguously are
merged first, so the common cases (same shape; per-channel vectors) become one
or two loops whose innermost one has stride 1 or 0, which LLVM vectorises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from vtakit.compiler.backends.cpu import buffers

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.elementwise import (add_int8_operands, batch_norm_channels, broadcast_shape,
                                                       clip_bounds, collapse, exponent, float_pair)
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32, KernelBuilder, elem_type
from vtakit.compiler.backends.cpu.jit import KernelKey, cached_plan, get_kernel
from vtakit.errors import pc_side_missing

try:
    from llvmlite import ir
except ImportError as missing:  # a board: kernels come prebuilt (jit.py), no IR is built here
    pc_side_missing(missing)

Expression: TypeAlias = "Callable[[KernelBuilder, list[ir.Value], tuple[Any, ...]], ir.Value]"


@dataclass(frozen=True)
class ElementwiseKernel:
    """An expression over strided operands, specialised on the (collapsed) output shape."""

    expression: str
    shape: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]  # per operand, in elements
    operand_types: tuple[str, ...]
    result_type: str
    params: tuple[Any, ...]


def _fclamp(kb: KernelBuilder, value: ir.Value, low: float, high: float) -> ir.Value:
    """min(max(value, low), high) that lets NaN through, as np.clip does."""
    b = kb.b
    low_c, high_c = ir.Constant(F32, low), ir.Constant(F32, high)
    value = b.select(b.fcmp_ordered("<", value, low_c), low_c, value)
    return b.select(b.fcmp_ordered(">", value, high_c), high_c, value)


def _relu(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    zero = ir.Constant(v[0].type, 0)
    if v[0].type == F32:
        return kb.b.select(kb.b.fcmp_ordered("<", v[0], zero), zero, v[0])
    return kb.smax(v[0], zero)


def _clip(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    low, high = params
    if v[0].type == F32:
        return _fclamp(kb, v[0], low, high)
    return kb.clamp_int(v[0], low, high)


def _add_int8(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    shift, low, high = params
    b = kb.b
    total = b.add(b.sext(v[0], I32), b.sext(v[1], I32))
    if shift:
        total = b.ashr(total, ir.Constant(I32, shift))
    return b.trunc(kb.clamp_int(total, low, high), I8)


def _quantize(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    b = kb.b
    scaled = kb.round_half_even(b.fmul(v[0], ir.Constant(F32, 2.0 ** params[0])))
    return b.trunc(b.fptosi(_fclamp(kb, scaled, -128.0, 127.0), I32), I8)


def _dequantize(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    return kb.b.fmul(kb.b.sitofp(v[0], F32), ir.Constant(F32, 2.0 ** -params[0]))


def _batch_norm(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    x, mean, factor, bias = v
    return kb.b.fadd(kb.b.fmul(kb.b.fsub(x, mean), factor, flags=("contract",)), bias, flags=("contract",))


EXPRESSIONS: dict[str, Expression] = {
    "add": lambda kb, v, p: kb.b.fadd(v[0], v[1]),
    "sub": lambda kb, v, p: kb.b.fsub(v[0], v[1]),
    "mul": lambda kb, v, p: kb.b.fmul(v[0], v[1]),
    "relu": _relu,
    "clip": _clip,
    "add_int8": _add_int8,
    "quantize": _quantize,
    "dequantize": _dequantize,
    "batch_norm": _batch_norm,
}


def _build(spec: ElementwiseKernel):
    names = [f"in{k}" for k in range(len(spec.strides))]
    kb = KernelBuilder(f"ew_{spec.expression}", [*names, "out"])
    types = [elem_type(t) for t in spec.operand_types]

    def nest(depth: int, out_index: ir.Value, in_indices: list[ir.Value]) -> None:
        if depth == len(spec.shape):
            values = [kb.load(kb[name], index, ty) for name, index, ty in zip(names, in_indices, types)]
            kb.store(EXPRESSIONS[spec.expression](kb, values, spec.params), kb["out"], out_index)
            return
        inner = int(np.prod(spec.shape[depth + 1:], dtype=np.int64))
        with kb.loop(spec.shape[depth], name=f"d{depth}") as i:
            nest(depth + 1, kb.idx(out_index, (i, inner)),
                 [kb.idx(index, (i, strides[depth])) for index, strides in zip(in_indices, spec.strides)])

    nest(0, kb.i64(0), [kb.i64(0)] * len(names))
    return kb.finish()


def apply(expression: str, operands: Sequence[np.ndarray], result_dtype, params: tuple = (),
          op: str | None = None) -> np.ndarray:
    """Broadcast C-contiguous `operands`, evaluate `expression` elementwise, return a fresh array."""
    result_dtype = np.dtype(result_dtype)
    signature = ("elementwise", expression, tuple([a.shape for a in operands]), tuple([a.dtype.char for a in operands]),
                 result_dtype.char, params)
    kernel, shape = cached_plan(signature, lambda: _plan(expression, operands, result_dtype, params, op or expression))
    out = buffers.empty_exact(shape, result_dtype)
    # The hot path of the host interpreter (a node of a long chain runs here once per sample and pass,
    # so a 200,000-node graph calls it millions of times): list comprehensions, no per-operand helper calls.  The kernel itself takes 0.2 us.
    kernel.function(*[a.ctypes.data for a in operands], out.ctypes.data)
    return out


def _plan(expression: str, operands: Sequence[np.ndarray], result_dtype: np.dtype, params: tuple, op: str):
    """(kernel, output shape) for operands of these shapes and dtypes."""
    shape = broadcast_shape([a.shape for a in operands], op)
    strides = [tuple(s // a.itemsize for s in np.broadcast_to(a, shape).strides) for a in operands]
    flat_shape, flat_strides = collapse(shape, strides)
    spec = ElementwiseKernel(expression, flat_shape, flat_strides, tuple(a.dtype.name for a in operands),
                             result_dtype.name, params)
    return get_kernel(KernelKey("elementwise", (spec,)), lambda: _build(spec), op), shape


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 a + b with numpy broadcasting."""
    return apply("add", float_pair(a, b, "add"), np.float32)


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 a - b with numpy broadcasting."""
    return apply("sub", float_pair(a, b, "sub"), np.float32)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 a * b with numpy broadcasting."""
    return apply("mul", float_pair(a, b, "mul"), np.float32)


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0) for float32, int8 or int32 (NaN stays NaN)."""
    x = checks.array(x, "x", "relu", [checks.FLOAT32, checks.INT8, checks.INT32])
    return apply("relu", [x], x.dtype)


def clip(x: np.ndarray, lo, hi) -> np.ndarray:
    """np.clip(x, lo, hi) for float32 or int8 (bounds must fit int8 for int8 x)."""
    op = "clip"
    x = checks.array(x, "x", op, [checks.FLOAT32, checks.INT8])
    return apply("clip", [x], x.dtype, clip_bounds(x.dtype, lo, hi, op))


def add_int8(a: np.ndarray, b: np.ndarray, *, shift: int = 0, clip: tuple[int, int] = (-128, 127)) -> np.ndarray:
    """clip((int32(a) + int32(b)) >> shift, lo, hi) as int8, broadcasting a and b."""
    a, b, params = add_int8_operands(a, b, shift, clip, "add_int8")
    return apply("add_int8", [a, b], np.int8, params)


def quantize(x: np.ndarray, exp: int) -> np.ndarray:
    """float32 -> int8: clip(round_half_even(x * 2**exp), -128, 127)."""
    x = checks.array(x, "x", "quantize", [checks.FLOAT32])
    return apply("quantize", [x], np.int8, (exponent(exp, "quantize"),))


def dequantize(q: np.ndarray, exp: int) -> np.ndarray:
    """int8 or int32 -> float32 q * 2**-exp (exact up to int32 -> float32 rounding)."""
    q = checks.array(q, "q", "dequantize", [checks.INT8, checks.INT32])
    return apply("dequantize", [q], np.float32, (exponent(exp, "dequantize"),))


def batch_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
               eps: float = 1e-5) -> np.ndarray:
    """Inference batch norm on NCHW float32: (x - mean) * scale / sqrt(var + eps) + bias."""
    op = "batch_norm"
    x = checks.array(x, "x", op, [checks.FLOAT32], ndim=4)
    per_channel = batch_norm_channels(x, scale, bias, mean, var, eps, op)
    return apply("batch_norm", [x, *per_channel], np.float32, op=op)
