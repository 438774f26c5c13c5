"""Elementwise operators as the host backends see them: broadcast shapes collapsed to the fewest axes."""

from __future__ import annotations

from collections.abc import Sequence


def collapse(shape: Sequence[int],
             strides: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop unit dimensions and merge neighbours every operand steps through contiguously."""
    dims = [(size, [s[i] for s in strides]) for i, size in enumerate(shape) if size != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, dim_strides in dims:
        if merged:
            outer_size, outer_strides = merged[-1]
            if all(o == s * size for o, s in zip(outer_strides, dim_strides)):
                merged[-1] = (outer_size * size, dim_strides)
                continue
        merged.append((size, dim_strides))
    if not merged:
        merged = [(1, [0] * len(strides))]
    return (tuple(size for size, _ in merged),
            tuple(tuple(dim[1][k] for dim in merged) for k in range(len(strides))))
