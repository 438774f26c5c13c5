"""A max pool fused into a convolution's output tile: the pooled tile is what the task stores.

After the requantizing epilogue a tile holds int8 values (in acc entries) for conv rows [a, b) and
every column.  The ALU then pools it on chip, never writing the conv's own output to DRAM:

1. rows: each tile row's windows along the width into a compact scratch (`POOL_ROWS`: MIN to
   minus infinity, then one MAX per window tap, the taps' valid windows only: padding never wins);
2. columns: each pooled row whose last valid conv row lies in this tile takes the MAX of its valid
   tap rows (MIN, then one MAX per tap) into the start of the tile's own slot, which the store
   then reads; rows above the tile come from `POOL_CARRY`;
3. carry: the rows the next tile's windows still need are copied to `POOL_CARRY` (per output
   block, so any tile order works as long as each block's row tiles finish top to bottom: the tiles
   hold whole rows, and virtual threads over rows take alternate tiles, `conv_schedule(interleave)`).

Tiles overlap by the pool's halo through the carry; no conv row is computed twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler.vta.affine import Affine
from vtakit.compiler.vta.lowering.tensorize import IntrinsicCall
from vtakit.compiler.vta.regions import Region
from vtakit.compiler.vta.te import ACC_MIN_IMM, ComputeDef, PoolWindow
from vtakit.isa.opcodes import AluOp

POOL_ROWS = "pool_rows"    # acc scratch: one tile's rows pooled along the width
POOL_CARRY = "pool_carry"  # acc: per output block, the last rows the next tile's windows read
POOL_OUT = "pool_out"      # acc, one per virtual thread: the pooled tile the store reads


def carry_rows(p: PoolWindow) -> int:
    """Conv rows a tile may need from the tile before it."""
    return max(0, p.kernel - 1)


def anchor_tap(p: PoolWindow, n: int) -> int | None:
    """A tap d whose input index s*i - pad + d lies inside the extent `n` for every window and inside no
    other window (then the rows pool in place there, one MAX per other tap), or None (a compact scratch)."""
    for d in range(max(0, p.kernel - p.stride), min(p.stride, p.kernel)):
        if p.first(0) + d >= 0 and p.first(p.out_size(n) - 1) + d < n:
            return d
    return None


def pooled_shape(compute: ComputeDef) -> tuple[int, ...]:
    """The DRAM "out" tensor of a pooled convolution."""
    nb, ocb, oh, ow = compute.out.tensor.shape
    return (nb, ocb, compute.pool.out_size(oh), compute.pool.out_size(ow))


def pool_footprints(compute: ComputeDef, tiles: list[Region]) -> dict[str, int]:
    """acc entries of the row scratch and pooled tile (largest tile) and of the carry (every block)."""
    p = compute.pool
    nb, ocb, _, ow = compute.out.tensor.shape
    pw = p.out_size(ow)
    pooled = [pool_tile(compute, t, 0, 0, 0, 0) for t in tiles]
    scratch = 0 if anchor_tap(p, ow) is not None else max(t.nn * t.nc * (t.b - t.a) * pw for t in pooled)
    return {POOL_ROWS: scratch, POOL_OUT: max(t.nn * t.nc * (t.i1 - t.i0) * pw for t in pooled),
            POOL_CARRY: nb * ocb * carry_rows(p) * pw}


def pool_schedule_reason(compute: ComputeDef, tile_oh: int, tile_ow: int) -> str | None:
    """Why convolution tiles of tile_oh x tile_ow cannot carry a fused pool (None if they can)."""
    _, _, oh, ow = compute.out.tensor.shape
    if tile_ow < ow:
        return f"tile_ow {tile_ow} splits the {ow} output columns (the pool needs whole rows per tile)"
    if tile_oh < min(oh, carry_rows(compute.pool)):
        return f"tile_oh {tile_oh} is below the pool's {carry_rows(compute.pool)} halo rows"
    return None


@dataclass(frozen=True)
class PoolTile:
    """One output tile's pooling: its conv rows [a, b), pooled rows [i0, i1) and on-chip bases."""

    n0: int
    nn: int
    c0: int
    nc: int
    a: int
    b: int
    i0: int
    i1: int
    tile: Region      # the conv tile in its acc slot (whole rows)
    base: int         # the tile slot's first entry
    rows_base: int    # POOL_ROWS
    out_base: int     # this thread's POOL_OUT
    carry_base: int   # POOL_CARRY

    def store_region(self, compute: ComputeDef) -> Region:
        shape = pooled_shape(compute)
        return Region((self.n0, self.c0, self.i0, 0), (self.nn, self.nc, self.i1 - self.i0, shape[3]),
                      (1, 1, 1, 1), shape)


def pool_tile(compute: ComputeDef, tile: Region, base: int, rows_base: int, out_base: int,
              carry_base: int) -> PoolTile:
    p = compute.pool
    oh = compute.out.tensor.shape[2]
    n0, c0, a, _ = tile.lo
    nn, nc, rows, _ = tile.count
    b = min(a + rows, oh)
    done = [i for i in range(p.out_size(oh)) if a <= p.valid(i, oh)[-1] < b]
    i0, i1 = (done[0], done[-1] + 1) if done else (0, 0)
    return PoolTile(n0, nn, c0, nc, a, b, i0, i1, tile, base, rows_base, out_base, carry_base)


def pool_calls(compute: ComputeDef, t: PoolTile) -> list[tuple[IntrinsicCall, str, str]]:
    """The ALU calls pooling one tile, in order, each with the buffer it reads and the one it writes
    ("tile", POOL_ROWS, POOL_OUT or POOL_CARRY; "" for none).

    With an anchor tap (`anchor_tap`, e.g. 3x3/2) each row pools in place at its anchor columns (one
    MAX per other tap); else (e.g. stride 1) into the compact POOL_ROWS (MIN, then a MAX per tap)."""
    p = compute.pool
    _, ocb, oh, ow = compute.out.tensor.shape
    pw, cr, s = p.out_size(ow), carry_rows(p), p.stride
    s0, s1, s2, s3 = t.tile.strides
    rows, n_out = t.b - t.a, t.i1 - t.i0
    anchor = anchor_tap(p, ow)
    blocks = (("n", t.nn), ("c", t.nc))
    calls: list[tuple[IntrinsicCall, str, str]] = []
    v = Affine.var

    def alu(loops, dst, src=None, imm=None, op=AluOp.MAX) -> IntrinsicCall:
        return IntrinsicCall("alu", blocks + tuple(loops), dst, src=src, op=op, imm=imm)

    def tile_at(row: Affine, col: Affine) -> Affine:        # conv tile entry, tile-relative row
        return v("n", s0) + v("c", s1) + row * s2 + col * s3 + t.base

    def scratch(row: Affine, base: int, count: int) -> Affine:  # compact (n, c, row, j) at `base`
        return v("n", t.nc * count * pw) + v("c", count * pw) + row * pw + v("j") + base

    def carry(row: Affine) -> Affine:          # POOL_CARRY (n, c, carry row, j), absolute blocks
        return (v("n", ocb * cr * pw) + v("c", cr * pw) + row * pw + v("j")
                + t.carry_base + (t.n0 * ocb + t.c0) * cr * pw)

    # 1. rows pooled along the width: hrow(row) addresses pooled row `row` (tile-relative), column j
    if anchor is not None:
        def hrow(row: Affine) -> Affine:
            return tile_at(row, v("j", s) + (p.first(0) + anchor))
        where = "tile"
        taps = [d for d in range(p.kernel) if d != anchor]
    else:
        def hrow(row: Affine) -> Affine:
            return scratch(row, t.rows_base, rows)
        where = POOL_ROWS
        taps = list(range(p.kernel))
        calls.append((alu((("r", rows), ("j", pw)), hrow(v("r")), imm=ACC_MIN_IMM, op=AluOp.MIN), "", POOL_ROWS))
    for d in taps:
        js = p.outputs(d, ow)
        if js:
            src = tile_at(v("r"), v("j", s) + (p.first(js.start) + d))
            dst = hrow(v("r")).substitute({"j": v("j") + js.start})
            calls.append((alu((("r", rows), ("j", len(js))), dst, src=src), "tile", where))
    # 2. pooled rows: out[i][j] = max over the valid tap rows (this tile's pooled rows, or the carry)
    if n_out:
        out_where = POOL_OUT
        out = scratch(Affine(), t.out_base, n_out) + v("i", pw)
        calls.append((alu((("i", n_out), ("j", pw)), out, imm=ACC_MIN_IMM, op=AluOp.MIN), "", out_where))
        for d in range(p.kernel):
            live = [i for i in p.outputs(d, oh) if t.i0 <= i < t.i1]
            for part, from_carry in (([i for i in live if p.first(i) + d < t.a], True),
                                     ([i for i in live if p.first(i) + d >= t.a], False)):
                if not part:
                    continue
                row0 = p.first(part[0]) + d - t.a
                src = carry(v("i", s) + row0 + cr) if from_carry else hrow(v("i", s) + row0)
                calls.append((alu((("i", len(part)), ("j", pw)), out + (part[0] - t.i0) * pw, src=src),
                              POOL_CARRY if from_carry else where, out_where))
    # 3. carry: this tile's last pooled rows, for the next tile of the same blocks
    keep = range(max(t.a, t.b - cr), t.b) if t.b < oh else range(0)
    if keep:
        dst = carry(v("r") + (keep.start - (t.b - cr)))
        calls.append((alu((("r", len(keep)), ("j", pw)), dst, imm=ACC_MIN_IMM, op=AluOp.MIN), "", POOL_CARRY))
        calls.append((alu((("r", len(keep)), ("j", pw)), dst, src=hrow(v("r") + (keep.start - t.a))),
                      where, POOL_CARRY))
    return calls


def tile_order_reason(compute: ComputeDef, tiles: list[Region]) -> str | None:
    """Why the output tiles, in program order, cannot carry the pool's halo (None if they can): every
    tile must hold whole rows, and each block's row tiles must follow each other top to bottom."""
    _, _, oh, ow = compute.out.tensor.shape
    cr = carry_rows(compute.pool)
    next_row: dict[tuple[int, int], int] = {}
    for t in tiles:
        n0, c0, a, x0 = t.lo
        if x0 != 0 or t.count[3] != ow:
            return f"a tile covers columns {x0}..{x0 + t.count[3] - 1} of {ow} (the pool needs whole rows)"
        for n in range(n0, n0 + t.count[0]):
            for c in range(c0, c0 + t.count[1]):
                if next_row.get((n, c), 0) != a:
                    return (f"the row tiles of output block {c} do not come top to bottom in order (virtual "
                            f"threads over rows?): rows from {a} follow rows up to {next_row.get((n, c), 0)}")
                next_row[(n, c)] = a + t.count[2]
        if t.count[2] < min(cr, oh - a):
            return f"a tile of {t.count[2]} rows is below the pool's {cr} halo rows"
    return None
