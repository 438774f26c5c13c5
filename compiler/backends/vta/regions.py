"""Which part of a tensor a tile touches, and where it sits in its on-chip buffer.

A tensor's index is affine in the axes, and a tile gives every axis an interval,
so the elements a tile reads form a box per tensor dimension (interval
arithmetic).  A dimension indexed as `s * axis + const` with s > 1 (a 1x1
convolution's stride) is kept strided: only every s-th row is moved.  The tile's
on-chip copy is that box in row-major order, parts outside the tensor included
(they become DMA padding), so on-chip addresses stay affine in the loop
variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from math import gcd, prod

from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.te import Access


@dataclass(frozen=True)
class Region:
    lo: tuple[int, ...]
    """First tensor index per dimension (negative where padding starts before the tensor)."""
    count: tuple[int, ...]
    """Indices per dimension, padding included."""
    step: tuple[int, ...]
    shape: tuple[int, ...]
    """The whole tensor's shape, to tell padding from data."""

    @property
    def size(self) -> int:
        return prod(self.count)

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major strides of the on-chip copy."""
        out, acc = [], 1
        for c in reversed(self.count):
            out.append(acc)
            acc *= c
        return tuple(reversed(out))

    def sram_offset(self, index: tuple[Affine, ...]) -> Affine:
        """On-chip offset (within the tile) of the element at `index`, affine in the loops."""
        total = Affine()
        for e, lo, step, stride in zip(index, self.lo, self.step, self.strides):
            rel = e - lo
            if step > 1:
                assert all(c % step == 0 for _, c in rel.terms) and rel.const % step == 0, rel
                rel = Affine(tuple((n, c // step) for n, c in rel.terms), rel.const // step)
            total = total + rel * stride
        return total

    def pads(self, dim: int) -> tuple[int, int]:
        """Indices before and after the tensor in one dimension (padded dims have step 1)."""
        lo, n = self.lo[dim], self.count[dim]
        return min(n, max(0, -lo)), min(n, max(0, lo + n - self.shape[dim]))


def region_of(access: Access, box: dict[str, tuple[int, int]]) -> Region:
    """The box of `access.tensor` the axis intervals in `box` read."""
    ranges = {ax: (start, start + length - 1) for ax, (start, length) in box.items()}
    lo, count, step = [], [], []
    for d, e in enumerate(access.index):
        a, b = e.bounds(ranges)
        varying = [abs(c) for n, c in e.terms if ranges[n][1] > ranges[n][0]]
        s = reduce(gcd, varying) if varying else 1
        # Strided rows only where no padding is involved (a padded tile stays dense).
        if s > 1 and (a < 0 or b >= access.tensor.shape[d] or d == len(access.index) - 1):
            s = 1
        lo.append(a)
        count.append((b - a) // s + 1)
        step.append(s)
    return Region(tuple(lo), tuple(count), tuple(step), access.tensor.shape)


def substitute_box(access: Access, box: dict[str, tuple[int, int]], inner: dict[str, str]) -> tuple[Affine, ...]:
    """The access index with each axis written as its tile start plus its inner loop variable
    (`inner` maps axis -> loop name; axes without an inner loop, or of length 1 in this tile,
    are fixed at their start)."""
    mapping = {ax: Affine.var(inner[ax]) + start if ax in inner and length > 1 else Affine.of(start)
               for ax, (start, length) in box.items()}
    return tuple(e.substitute(mapping) for e in access.index)
