"""Elementwise GPU kernels with numpy broadcasting, and the strided copy the layout kernels build on.

One kernel family: a grid-stride loop over the output's elements (1-D grid of
256-thread blocks) that turns the flat index into coordinates of the collapsed
shape, reads each operand through its strides, evaluates an expression and
writes through the output's strides.  The expressions are the CPU backend's
(`cpu.elementwise.EXPRESSIONS`, the same IR helpers), so integer results match
it bit for bit; `copy` and the ONNX QuantizeLinear/DequantizeLinear pair are
added here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.cpu.elementwise import EXPRESSIONS as CPU_EXPRESSIONS, Expression
from vtakit.compiler.backends.host.elementwise import (add_int8_operands, batch_norm_channels, broadcast_shape,
                                                       clip_bounds, collapse, exponent, float_pair)
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32, KernelBuilder, elem_type
from vtakit.compiler.backends.cuda.call import Call
from vtakit.compiler.backends.cuda.device_array import DeviceArray, GpuBackend, broadcast_strides, contiguous_strides, operand
from vtakit.compiler.backends.cuda.kernel import GpuKernelBuilder, grid_1d, make_kernel
from vtakit.errors import CompileError


def _quantize_linear(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    """rint(x / scale) + zero_point, clipped to the integer type (numpy's float32 arithmetic)."""
    scale, zero_point, low, high = params
    b = kb.b
    q = b.fadd(kb.round_half_even(b.fdiv(v[0], ir.Constant(F32, scale))), ir.Constant(F32, float(zero_point)))
    q = b.select(b.fcmp_ordered("<", q, ir.Constant(F32, float(low))), ir.Constant(F32, float(low)), q)
    q = b.select(b.fcmp_ordered(">", q, ir.Constant(F32, float(high))), ir.Constant(F32, float(high)), q)
    return b.trunc(b.fptosi(q, I32), I8)


def _dequantize_linear(kb: KernelBuilder, v: list[ir.Value], params: tuple) -> ir.Value:
    """float32(int32(x) - zero_point) * scale."""
    scale, zero_point, unsigned = params
    b = kb.b
    wide = b.zext(v[0], I32) if unsigned else b.sext(v[0], I32)
    return b.fmul(b.sitofp(b.sub(wide, ir.Constant(I32, zero_point)), F32), ir.Constant(F32, scale))


EXPRESSIONS: dict[str, Expression] = {
    **CPU_EXPRESSIONS,
    "copy": lambda kb, v, p: v[0],
    "quantize_linear": _quantize_linear,
    "dequantize_linear": _dequantize_linear,
}


@dataclass(frozen=True)
class StridedKernel:
    """An expression over strided operands into a strided output, on a collapsed shape."""

    expression: str
    shape: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]  # per operand, in elements
    out_strides: tuple[int, ...]
    operand_types: tuple[str, ...]
    result_type: str
    params: tuple[Any, ...]


def _emit_strided(kb: GpuKernelBuilder, spec: StridedKernel) -> None:
    b = kb.b
    names = [f"in{k}" for k in range(len(spec.strides))]
    types = [elem_type(t) for t in spec.operand_types]
    contiguous_out = spec.out_strides == contiguous_strides(spec.shape)
    with kb.grid_stride(math.prod(spec.shape)) as item:
        coordinates: list[ir.Value] = []
        rest = item
        for size in reversed(spec.shape[1:]):
            coordinates.append(b.urem(rest, kb.i64(size)))
            rest = b.udiv(rest, kb.i64(size))
        coordinates.append(rest)
        coordinates.reverse()

        def index(offset: ir.Value, strides: Sequence[int]) -> ir.Value:
            return kb.idx(offset, *((c, s) for c, s in zip(coordinates, strides)))

        values = [kb.load(kb[name], index(kb[f"{name}_offset"], strides), ty)
                  for name, strides, ty in zip(names, spec.strides, types)]
        at = kb.idx(kb["out_offset"], item) if contiguous_out else index(kb["out_offset"], spec.out_strides)
        kb.store(EXPRESSIONS[spec.expression](kb, values, spec.params), kb["out"], at)


def strided_kernel(spec: StridedKernel):
    total = math.prod(spec.shape)
    names = [f"in{k}" for k in range(len(spec.strides))]
    return make_kernel(f"ew_{spec.expression}", spec, grid_1d(total), [*names, "out"],
                       [f"{name}_offset" for name in names] + ["out_offset"], _emit_strided)


def run_strided(call: Call, expression: str, operands: Sequence[tuple[DeviceArray, tuple[int, ...], int]],
                shape: tuple[int, ...], out: DeviceArray, out_strides: tuple[int, ...], out_offset: int,
                params: tuple = ()) -> None:
    """out[view] = expression(operand views); each operand is (array, strides over `shape`, element offset)."""
    flat_shape, flat = collapse(shape, [s for _, s, _ in operands] + [out_strides])
    spec = StridedKernel(expression, flat_shape, flat[:-1], flat[-1], tuple(a.dtype.name for a, _, _ in operands),
                         out.dtype.name, params)
    kernel = strided_kernel(spec)
    call.launch(kernel, *(a for a, _, _ in operands), out, *(offset for _, _, offset in operands), out_offset)


def apply(op: str, expression: str, operands: Sequence[Any], result_dtype: Any, params: tuple = (),
          gpu: GpuBackend | None = None) -> np.ndarray | DeviceArray:
    """Broadcast the operands, evaluate `expression` elementwise into a fresh contiguous array."""
    call = Call(op, operands, gpu)
    arrays = [call.device(a) for a in operands]
    shape = broadcast_shape([a.shape for a in arrays], op)
    out = call.empty(shape, result_dtype)
    run_strided(call, expression, [(a, broadcast_strides(a.shape, shape), 0) for a in arrays], shape, out,
                contiguous_strides(shape), 0, params)
    return call.result(out)


def _float_pair(a, b, op: str) -> list:
    return float_pair(a, b, op, operand)


def add(a, b, *, gpu: GpuBackend | None = None):
    """float32 a + b with numpy broadcasting."""
    return apply("add", "add", _float_pair(a, b, "add"), np.float32, gpu=gpu)


def sub(a, b, *, gpu: GpuBackend | None = None):
    """float32 a - b with numpy broadcasting."""
    return apply("sub", "sub", _float_pair(a, b, "sub"), np.float32, gpu=gpu)


def mul(a, b, *, gpu: GpuBackend | None = None):
    """float32 a * b with numpy broadcasting."""
    return apply("mul", "mul", _float_pair(a, b, "mul"), np.float32, gpu=gpu)


def relu(x, *, gpu: GpuBackend | None = None):
    """max(x, 0) for float32, int8 or int32."""
    x = operand(x, "x", "relu", [checks.FLOAT32, checks.INT8, checks.INT32])
    return apply("relu", "relu", [x], x.dtype, gpu=gpu)


def clip(x, lo, hi, *, gpu: GpuBackend | None = None):
    """np.clip(x, lo, hi) for float32 or int8 (bounds must fit int8 for int8 x)."""
    op = "clip"
    x = operand(x, "x", op, [checks.FLOAT32, checks.INT8])
    return apply(op, "clip", [x], x.dtype, clip_bounds(x.dtype, lo, hi, op), gpu=gpu)


def add_int8(a, b, *, shift: int = 0, clip: tuple[int, int] = (-128, 127), gpu: GpuBackend | None = None):
    """clip((int32(a) + int32(b)) >> shift, lo, hi) as int8, broadcasting a and b."""
    op = "add_int8"
    a, b, params = add_int8_operands(a, b, shift, clip, op, operand)
    return apply(op, "add_int8", [a, b], np.int8, params, gpu=gpu)


def quantize(x, exp: int, *, gpu: GpuBackend | None = None):
    """float32 -> int8: clip(round_half_even(x * 2**exp), -128, 127)."""
    x = operand(x, "x", "quantize", [checks.FLOAT32])
    return apply("quantize", "quantize", [x], np.int8, (exponent(exp, "quantize"),), gpu=gpu)


def dequantize(q, exp: int, *, gpu: GpuBackend | None = None):
    """int8 or int32 -> float32 q * 2**-exp."""
    q = operand(q, "q", "dequantize", [checks.INT8, checks.INT32])
    return apply("dequantize", "dequantize", [q], np.float32, (exponent(exp, "dequantize"),), gpu=gpu)


def quantize_linear(x, scale: float, zero_point: int, dtype: Any, *, gpu: GpuBackend | None = None):
    """ONNX QuantizeLinear to int8/uint8: clip(rint(x / scale) + zero_point)."""
    op = "quantize_linear"
    x = operand(x, "x", op, [checks.FLOAT32])
    info = np.iinfo(np.dtype(dtype))
    if info.bits != 8:
        raise CompileError(f"QuantizeLinear to {np.dtype(dtype).name} is not supported on the GPU (8-bit only)", op=op)
    params = (float(np.float32(scale)), int(zero_point), int(info.min), int(info.max))
    return apply(op, "quantize_linear", [x], dtype, params, gpu=gpu)


def dequantize_linear(x, scale: float, zero_point: int, *, gpu: GpuBackend | None = None):
    """ONNX DequantizeLinear from int8/uint8: float32(x - zero_point) * scale."""
    op = "dequantize_linear"
    x = operand(x, "x", op, [checks.INT8, np.dtype(np.uint8)])
    params = (float(np.float32(scale)), int(zero_point), x.dtype == np.uint8)
    return apply(op, "dequantize_linear", [x], np.float32, params, gpu=gpu)


def batch_norm(x, scale, bias, mean, var, eps: float = 1e-5, *, gpu: GpuBackend | None = None):
    """Inference batch norm on NCHW float32; the per-channel factor is prepared on the host as on the CPU."""
    op = "batch_norm"
    x = operand(x, "x", op, [checks.FLOAT32], ndim=4)
    scale, bias, mean, var = (v.numpy() if isinstance(v, DeviceArray) else v for v in (scale, bias, mean, var))
    per_channel = batch_norm_channels(x, scale, bias, mean, var, eps, op)
    return apply(op, "batch_norm", [x, *per_channel], np.float32, gpu=gpu)
