"""MatMul and dense as the host backends see them: their argument checks, the broadcast batch and
where each batch entry's matrices start."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Checker
from vtakit.errors import CompileError

MATMUL = "matmul"
DENSE = "dense"


def batch_offsets(shape: tuple[int, ...], batch_shape: tuple[int, ...], matrix: int) -> np.ndarray:
    """Element offset of each broadcast batch entry's matrix in an operand of batch `shape`."""
    index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape) * matrix
    return np.ascontiguousarray(np.broadcast_to(index, batch_shape)).reshape(-1)


def matmul_operands(a, b, checked: Checker = checks.array) -> tuple[Any, Any, tuple[int, ...], tuple[int, ...]]:
    """(a, b, a's shape, b's shape) for a float32 MatMul, the shapes with 1-D operands promoted to matrices
    (a row for a, a column for b), checked to agree on the inner dimension."""
    a = checked(a, "a", MATMUL, [checks.FLOAT32])
    b = checked(b, "b", MATMUL, [checks.FLOAT32])
    if a.ndim == 0 or b.ndim == 0:
        raise CompileError(f"operands must have at least one dimension, got {a.shape} and {b.shape}", op=MATMUL)
    a_shape = (1, *a.shape) if a.ndim == 1 else tuple(a.shape)
    b_shape = (*b.shape, 1) if b.ndim == 1 else tuple(b.shape)
    if a_shape[-1] != b_shape[-2]:
        raise CompileError(f"inner dimensions differ: a {a.shape} and b {b.shape}", op=MATMUL)
    return a, b, a_shape, b_shape


def matmul_batch(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast batch shape of two (promoted) MatMul operands."""
    try:
        return tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    except ValueError:
        raise CompileError(f"batch dimensions do not broadcast: {a_shape} and {b_shape}", op=MATMUL) from None


def dense_operands(x, w, bias, checked: Checker = checks.array) -> tuple[Any, Any, Any, bool]:
    """(x, w, bias, integer) for dense: x (N, K), w (O, K) of x's dtype, bias None or one entry per output."""
    x, w, integer = checks.weighted(x, w, DENSE, 2, checked)
    if w.shape[1] != x.shape[1]:
        raise CompileError(f"x has {x.shape[1]} features but w expects {w.shape[1]}", op=DENSE)
    return x, w, checks.bias_vector(bias, integer, w.shape[0], "outputs", DENSE, checked), integer
