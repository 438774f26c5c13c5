"""DMA insertion: a tile region becomes 2-D LOAD / STORE instructions.

The innermost dimensions the region covers completely merge with the last
partial one into each transfer's contiguous run (x), the dimension before gives
the rows (y, with a stride, every s-th row for strided regions); any dimensions
further out repeat the transfer.  Parts of the region outside the tensor become
the LOAD padding fields, which is how convolution borders cost no DRAM traffic;
a "min" padded tensor (max pooling) gets its padding overwritten with the most
negative value by ALU MIN instructions, described here as fills.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.regions import Region
from vtakit.isa.fields import MEM_PAD_BITS, MEM_SIZE_BITS

_MAX_SIZE = (1 << MEM_SIZE_BITS) - 1
_MAX_PAD = (1 << MEM_PAD_BITS) - 1


@dataclass(frozen=True)
class Transfer:
    """Fields of one LOAD/STORE; dram_offset is in elements from the tensor's start."""

    sram_base: int
    dram_offset: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0


@dataclass(frozen=True)
class Fill:
    """Entries base + o * factor + u for o < iters, u in offsets: padding to overwrite."""

    base: int
    iters: int
    factor: int
    offsets: tuple[int, ...]


def _full(r: Region, d: int) -> bool:
    return r.lo[d] == 0 and r.count[d] == r.shape[d] and r.step[d] == 1


def plan_transfers(region: Region, sram_base: int, *, what: str,
                   allow_pad: bool = True) -> tuple[list[Transfer], list[Fill]]:
    """LOAD/STORE fields moving `region` to or from its row-major on-chip copy at `sram_base`,
    and the padding runs of each transfer (for "min" padding)."""
    k = len(region.shape)
    partial = [d for d in range(k) if not _full(region, d)]
    c = partial[-1] if partial else -1
    if c >= 0 and region.step[c] > 1:
        x_dim, y_dim = None, c            # strided rows of whole trailing dims
    else:
        x_dim, y_dim = (c if c >= 0 else None), (c - 1 if c >= 1 else None)
    first_x = (x_dim + 1) if x_dim is not None else (y_dim + 1 if y_dim is not None else 0)
    inner = prod(region.shape[first_x:])
    dram_strides = [prod(region.shape[d + 1:]) for d in range(k)]
    sram_strides = region.strides

    def span(d):
        """(first in-range index, in-range count, pads before, pads after) of dimension d."""
        p0, p1 = region.pads(d)
        n = region.count[d] - p0 - p1
        return region.lo[d] + p0 * region.step[d], n, p0, p1

    xs = span(x_dim) if x_dim is not None else (0, 1, 0, 0)
    ys = span(y_dim) if y_dim is not None else (0, 1, 0, 0)
    for d in range(k):
        if d not in (x_dim, y_dim) and region.pads(d) != (0, 0):
            raise CompileError(f"{what}: padding in dimension {d} cannot be expressed by a 2-D DMA")
    if (xs[2] or xs[3] or ys[2] or ys[3]) and not allow_pad:
        raise CompileError(f"{what}: a STORE cannot pad")
    if xs[1] <= 0 or ys[1] <= 0:
        raise CompileError(f"{what}: a tile lies entirely in the padding (padding larger than the window?)")
    x_size = xs[1] * inner
    x_pads = (xs[2] * inner, xs[3] * inner)
    stride = (region.step[y_dim] * dram_strides[y_dim]) if y_dim is not None else x_size
    if y_dim is not None and stride > _MAX_SIZE and ys[2] == ys[3] == 0:
        # rows too far apart for the stride field (a large feature map's channel blocks): one transfer
        # per row, the rows repeated like the dimensions further out
        y_dim, ys, stride = None, (0, 1, 0, 0), x_size
    checks = {"y_size": (ys[1], _MAX_SIZE), "x_size": (x_size, _MAX_SIZE), "x_stride": (stride, _MAX_SIZE),
              "y_pad": (max(ys[2], ys[3]), _MAX_PAD), "x_pad": (max(x_pads), _MAX_PAD)}
    for field, (value, limit) in checks.items():
        if value > limit:
            raise CompileError(f"{what}: {field} {value} exceeds the instruction field's {limit}; "
                               f"use smaller tiles")

    outer_dims = [d for d in range(k) if d not in (x_dim, y_dim) and d < first_x]
    rows = ys[2] + ys[1] + ys[3]
    cols = x_pads[0] + x_size + x_pads[1]
    transfers, fills = [], []
    for idx in product(*(range(region.count[d]) for d in outer_dims)):
        sram = sram_base + sum(i * sram_strides[d] for i, d in zip(idx, outer_dims))
        first = {d: region.lo[d] + i * region.step[d] for i, d in zip(idx, outer_dims)}
        if x_dim is not None:
            first[x_dim] = xs[0]
        if y_dim is not None:
            first[y_dim] = ys[0]
        dram = sum(first.get(d, 0) * dram_strides[d] for d in range(k))
        transfers.append(Transfer(sram, dram, ys[1], x_size, stride, ys[2], ys[3], x_pads[0], x_pads[1]))
        fills += _pad_fills(sram, rows, cols, ys, x_pads, x_size)
    return transfers, fills


def _pad_fills(block: int, rows: int, cols: int, ys, x_pads, x_size) -> list[Fill]:
    fills = []
    if ys[2]:
        fills.append(Fill(block, ys[2] * cols, 1, (0,)))
    if ys[3]:
        fills.append(Fill(block + (ys[2] + ys[1]) * cols, ys[3] * cols, 1, (0,)))
    body = block + ys[2] * cols
    if x_pads[0]:
        fills.append(Fill(body, ys[1], cols, tuple(range(x_pads[0]))))
    if x_pads[1]:
        fills.append(Fill(body + x_pads[0] + x_size, ys[1], cols, tuple(range(x_pads[1]))))
    return fills
