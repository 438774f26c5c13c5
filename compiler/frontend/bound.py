"""Inputs bound to values at compile time (`bind={"sr": 16000}`, `--bind sr=16000`).

A bound input becomes a constant of the graph and leaves its inputs, so what depends only on it folds
away at import: the Equal on a sample rate, and the If it decides (`control_flow`).  Its value must be of
the input's element type (an integer for an int64 input, a bool for a bool one; a float input takes any
number) and of its declared shape (a symbolic dimension takes the value's size); anything else is one
CompileError naming the input.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from vtakit.compiler.frontend.onnx_types import onnx_dtype
from vtakit.errors import CompileError

KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}
"""Numpy kind of an input -> the kinds of value it takes (a bool is no number here, a number no bool)."""


def bound_inputs(graph, consts: Mapping[str, Any], values: Mapping[str, Any] | None,
                 shapes: Mapping[str, Any]) -> list:
    """The graph inputs (ValueInfoProtos) that `values` binds, its names checked against the model's."""
    if not values:
        return []
    if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
        raise CompileError(f"bind takes input names and their values, got {str(values)[:60]!r}")
    inputs = [vi for vi in graph.input if vi.name not in consts]
    unknown = sorted(set(values) - {vi.name for vi in inputs})
    if unknown:
        raise CompileError(f"bind names unknown inputs {unknown}; the model's inputs are {[vi.name for vi in inputs]}")
    both = sorted(set(values) & set(shapes))
    if both:
        raise CompileError(f"inputs {both} are both bound to values and given shapes; a bound value has its shape")
    return [vi for vi in inputs if vi.name in values]


def bound_value(vi, value: Any) -> np.ndarray:
    """`value` as a constant for the input `vi`: its element type and shape checked (one error line)."""
    tt = vi.type.tensor_type
    dtype = onnx_dtype(tt.elem_type)
    shown = str(value).replace("\n", " ")[:40]
    if dtype is None or np.dtype(dtype).kind not in KINDS:
        raise CompileError(f"bind[{vi.name!r}]: the input's element type ({dtype or tt.elem_type}) takes no bound value")
    want = np.dtype(dtype)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        arr = np.asarray(None, object)
    if arr.dtype.kind not in KINDS[want.kind]:
        raise CompileError(f"bind[{vi.name!r}] = {shown!r} is not a value of the input's type {want.name}")
    if want.kind in "iu" and arr.size and (arr.min() < np.iinfo(want).min or arr.max() > np.iinfo(want).max):
        raise CompileError(f"bind[{vi.name!r}] = {shown!r} does not fit the input's type {want.name}")
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
        if arr.ndim != len(dims) or any(d is not None and d != s for d, s in zip(dims, arr.shape)):
            declared = tuple(d if d is not None else "?" for d in dims)
            raise CompileError(f"bind[{vi.name!r}] has shape {arr.shape}; the input is declared {declared}")
    return np.ascontiguousarray(arr.astype(want))
