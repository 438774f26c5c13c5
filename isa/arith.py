"""Integer helpers every layer uses (sizes in blocks, aligned addresses)."""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """The smallest integer >= a / b, for b > 0 (exact for Python ints of any size)."""
    return -(-a // b)


def round_up(a: int, multiple: int) -> int:
    """`a` rounded up to a multiple of `multiple` (> 0): an aligned size or address."""
    return ceil_div(a, multiple) * multiple
