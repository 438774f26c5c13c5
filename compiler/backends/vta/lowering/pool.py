"""A max pool fused into a convolution's output tile: the pooled tile is what the task stores.

A tile holds the conv's accumulators for rows [a, b) and every column.  The epilogue's leading steps
run over it; its monotone tail (shifts right, by an immediate or a per-channel vector, and clips: each
a non-decreasing function per channel, so it commutes with max) runs after the pool, over a quarter
of the entries for a 3x3/2 pool.  The ALU pools on chip, never writing the conv's output to DRAM:

1. rows: each tile row's windows along the width, in place at an anchor column (a tap no other
   window reads: one MAX per other tap), or into the compact scratch `POOL_ROWS`;
2. columns: each pooled row whose last valid conv row lies in this tile takes its valid tap rows
   (rows above the tile come from `POOL_CARRY`; padding is skipped, it never wins a max): in place
   at its anchor row when every pooled row of every tile has one with the row below it in the tile
   (`rows_in_place`, ResNet's 3x3/2 on even row tiles), then gathered into that row below, which is
   no longer read (no extra buffer; stored row by row); else gathered into `POOL_OUT`, one per
   virtual thread (a GEMM reset, an ADD of each output's first valid tap, a MAX per further tap:
   exact for any int32);
3. carry: the rows the next tile's windows still need are copied to `POOL_CARRY` (per output block,
   so any tile order works as long as each block's row tiles finish top to bottom: the tiles hold
   whole rows, and virtual threads over rows take alternate tiles, `conv_schedule(interleave)`).

No conv row is computed twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.lowering.tensorize import IntrinsicCall
from vtakit.compiler.backends.vta.regions import Region
from vtakit.compiler.backends.vta.te import AluStep, ComputeDef, PoolWindow
from vtakit.isa.opcodes import AluOp

POOL_ROWS = "pool_rows"    # acc scratch: one tile's rows pooled along the width (no anchor tap only)
POOL_OUT = "pool_out"      # acc, one per virtual thread: the pooled tile the store reads
POOL_CARRY = "pool_carry"  # acc: per output block, the last rows the next tile's windows read

_MONOTONE = (AluOp.SHR, AluOp.MIN, AluOp.MAX)


def after_pool(steps: tuple[AluStep, ...]) -> int:
    """Where the epilogue's monotone tail starts: shifts right and clips by immediates or per-channel
    vectors commute with max, so they run on the pooled tile (steps before run on the whole tile)."""
    def monotone(step: AluStep) -> bool:
        if step.op not in _MONOTONE:
            return False
        if step.operand is None:   # a clip bound, or a right shift (a negative amount shifts left: may wrap)
            return step.op is not AluOp.SHR or (step.imm or 0) >= 0
        return step.op is AluOp.SHR and {v for e in step.operand.index for v in e.vars} <= {"n", "oc"}

    cut = len(steps)
    while cut and monotone(steps[cut - 1]):
        cut -= 1
    return cut


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


def pooled_rows(p: PoolWindow, oh: int, a: int, b: int) -> range:
    """The pooled rows whose last valid conv row lies in [a, b) (a tile of rows a..b-1 finishes them)."""
    done = [i for i in range(p.out_size(oh)) if a <= p.valid(i, oh)[-1] < b]
    return range(done[0], done[-1] + 1) if done else range(0)


def halo_rows(p: PoolWindow, oh: int, starts: list[int]) -> int:
    """Conv rows a tile needs from the tile before it, at most, for tiles starting at `starts`."""
    halo = 0
    bounds = sorted(set(starts)) + [oh]
    for a, b in zip(bounds, bounds[1:]):
        rows = pooled_rows(p, oh, a, b)
        if rows:
            halo = max(halo, a - p.valid(rows[0], oh)[0])
    return halo


def rows_in_place(p: PoolWindow, oh: int, ow: int, bounds: list[tuple[int, int]]) -> bool:
    """Whether every tile (conv rows [a, b)) can pool down the rows in place: each of its pooled rows
    has an anchor row (`anchor_tap` along the height) and the row below it inside the tile, where the
    pooled row is then gathered once those rows are read (no POOL_OUT buffer)."""
    if p.stride < 2 or anchor_tap(p, ow) is None or anchor_tap(p, oh) is None:
        return False
    d = anchor_tap(p, oh)
    return all(a <= p.first(i) + d and p.first(i) + d + 1 < b for a, b in bounds for i in pooled_rows(p, oh, a, b))


def _bounds(compute: ComputeDef, tiles: list[Region]) -> list[tuple[int, int]]:
    oh = compute.out.tensor.shape[2]
    return [(t.lo[2], min(t.lo[2] + t.count[2], oh)) for t in tiles]


def pool_footprints(compute: ComputeDef, tiles: list[Region]) -> dict[str, int]:
    """acc entries of the row scratch and pooled tile (largest tile) and of the carry (every block)."""
    p = compute.pool
    nb, ocb, oh, ow = compute.out.tensor.shape
    pw = p.out_size(ow)
    halo = halo_rows(p, oh, [t.lo[2] for t in tiles])
    pooled = [pool_tile(compute, t, halo, False, 0, 0, 0, 0) for t in tiles]
    scratch = 0 if anchor_tap(p, ow) is not None else max(t.nn * t.nc * (t.b - t.a) * pw for t in pooled)
    out = 0 if rows_in_place(p, oh, ow, _bounds(compute, tiles)) else \
        max(t.nn * t.nc * (t.i1 - t.i0) * pw for t in pooled)
    return {POOL_ROWS: scratch, POOL_OUT: out, POOL_CARRY: nb * ocb * halo * pw}


def tiles_in_place(compute: ComputeDef, tiles: list[Region]) -> bool:
    """`rows_in_place` for a convolution's output tiles."""
    _, _, oh, ow = compute.out.tensor.shape
    return rows_in_place(compute.pool, oh, ow, _bounds(compute, tiles))


def pool_schedule_reason(compute: ComputeDef, tile_oh: int, tile_ow: int) -> str | None:
    """Why convolution tiles of tile_oh x tile_ow cannot carry a fused pool (None if they can)."""
    p = compute.pool
    _, _, oh, ow = compute.out.tensor.shape
    if tile_ow < ow:
        return f"tile_ow {tile_ow} splits the {ow} output columns (the pool needs whole rows per tile)"
    halo = halo_rows(p, oh, list(range(0, oh, tile_oh)))
    if halo > tile_oh:
        return f"tile_oh {tile_oh} is below the pool's {halo} halo rows"
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
    halo: int         # carry rows per block
    in_place: bool    # pooled rows gathered in the tile (`rows_in_place`), else in POOL_OUT
    tile: Region      # the conv tile in its acc slot (whole rows)
    base: int         # the tile slot's first entry
    rows_base: int    # POOL_ROWS
    out_base: int     # this thread's POOL_OUT
    carry_base: int   # POOL_CARRY

    def out_at(self, compute: ComputeDef) -> Affine:
        """Where pooled entry (n, c, i, j) of this tile lies on chip (i, j relative to the tile)."""
        p = compute.pool
        pw = p.out_size(compute.out.tensor.shape[3])
        v = Affine.var
        if not self.in_place:
            count = self.i1 - self.i0
            return v("n", self.nc * count * pw) + v("c", count * pw) + v("i", pw) + v("j") + self.out_base
        s0, s1, s2, s3 = self.tile.strides
        row = v("i", p.stride) + (p.first(self.i0) + anchor_tap(p, compute.out.tensor.shape[2]) + 1 - self.a)
        return v("n", s0) + v("c", s1) + row * s2 + v("j", s3) + self.base

    def store_region(self, compute: ComputeDef) -> Region:
        shape = pooled_shape(compute)
        return Region((self.n0, self.c0, self.i0, 0), (self.nn, self.nc, self.i1 - self.i0, shape[3]),
                      (1, 1, 1, 1), shape)


def pool_tile(compute: ComputeDef, tile: Region, halo: int, in_place: bool, base: int, rows_base: int,
              out_base: int, carry_base: int) -> PoolTile:
    oh = compute.out.tensor.shape[2]
    n0, c0, a, _ = tile.lo
    nn, nc, rows, _ = tile.count
    b = min(a + rows, oh)
    done = pooled_rows(compute.pool, oh, a, b)
    return PoolTile(n0, nn, c0, nc, a, b, done.start, done.stop, halo, in_place, tile, base, rows_base,
                    out_base, carry_base)


Call = tuple[IntrinsicCall, str, str]


def _gather(outer: tuple, var: str, count: int, inner: tuple, dst: Affine, taps, writes: str) -> list[Call]:
    """dst[o] for o < count (loop `var`, between the `outer` and `inner` loops) = max of its valid taps: a
    GEMM reset, then per tap an ADD where it is the output's first valid tap, a MAX elsewhere (exact for
    any int32, no minus-infinity fill).  `taps`: (first output, outputs, src affine in var, buffer)."""
    def loops(m: int) -> tuple:
        return outer + ((var, m),) + inner

    calls: list[Call] = [(IntrinsicCall("reset", loops(count), dst), "", writes)]
    seen: set[int] = set()
    for start, n, src, where in taps:
        ops = [AluOp.MAX if o in seen else AluOp.ADD for o in range(start, start + n)]
        seen.update(range(start, start + n))
        lo = 0
        while lo < n:
            hi = lo
            while hi < n and ops[hi] == ops[lo]:
                hi += 1
            at = {var: Affine.var(var) + start + lo}
            calls.append((IntrinsicCall("alu", loops(hi - lo), dst.substitute(at), src=src.substitute(at),
                                        op=ops[lo]), where, writes))
            lo = hi
    return calls


def pool_calls(compute: ComputeDef, t: PoolTile) -> list[Call]:
    """The ALU calls pooling one tile before the epilogue's tail, in order, each with the buffer it
    reads and the one it writes ("tile", POOL_ROWS, POOL_OUT or POOL_CARRY; "" for none)."""
    p = compute.pool
    _, ocb, oh, ow = compute.out.tensor.shape
    pw, s, cr = p.out_size(ow), p.stride, t.halo
    s0, s1, s2, s3 = t.tile.strides
    rows, n_out = t.b - t.a, t.i1 - t.i0
    anchor = anchor_tap(p, ow)
    blocks = (("n", t.nn), ("c", t.nc))
    v = Affine.var
    calls: list[Call] = []

    def tile_at(row: Affine, col: Affine) -> Affine:            # conv tile entry, tile-relative row
        return v("n", s0) + v("c", s1) + row * s2 + col * s3 + t.base

    def compact(row: Affine, base: int, count: int) -> Affine:  # (n, c, row, j) rows of pw at `base`
        return v("n", t.nc * count * pw) + v("c", count * pw) + row * pw + v("j") + base

    def carry(row: Affine) -> Affine:                           # POOL_CARRY, absolute blocks
        return (v("n", ocb * cr * pw) + v("c", cr * pw) + row * pw + v("j")
                + t.carry_base + (t.n0 * ocb + t.c0) * cr * pw)

    # 1. rows pooled along the width: hrow(row) addresses pooled column j of tile row `row`
    if anchor is not None:
        def hrow(row: Affine) -> Affine:
            return tile_at(row, v("j", s) + (p.first(0) + anchor))
        where = "tile"
        for d in range(p.kernel):
            js = p.outputs(d, ow)
            if d != anchor and js:
                src = tile_at(v("r"), v("j", s) + (p.first(js.start) + d))
                dst = hrow(v("r")).substitute({"j": v("j") + js.start})
                calls.append((IntrinsicCall("alu", blocks + (("r", rows), ("j", len(js))), dst, src=src,
                                            op=AluOp.MAX), "tile", "tile"))
    else:
        def hrow(row: Affine) -> Affine:
            return compact(row, t.rows_base, rows)
        where = POOL_ROWS
        taps = []
        for d in range(p.kernel):
            js = p.outputs(d, ow)
            if js:
                taps.append((js.start, len(js), tile_at(v("r"), v("j", s) + (d - p.pad)), "tile"))
        calls += _gather(blocks + (("r", rows),), "j", pw, (), hrow(v("r")), taps, POOL_ROWS)
    # 2. pooled rows: out[i][j] = max over the valid tap rows (this tile's, or the carry's)
    dr = anchor_tap(p, oh) if t.in_place else None
    taps = []
    for d in range(p.kernel):
        live = [i - t.i0 for i in p.outputs(d, oh) if t.i0 <= i < t.i1]
        for part, from_carry in (([i for i in live if p.first(i + t.i0) + d < t.a], True),
                                 ([i for i in live if p.first(i + t.i0) + d >= t.a], False)):
            if part and d != dr:
                row = v("i", s) + (p.first(t.i0) + d - t.a)       # tile row of output i's tap d
                src = carry(row + cr) if from_carry else hrow(row)
                taps.append((part[0], len(part), src, POOL_CARRY if from_carry else where))
    if n_out and dr is not None:   # in place: MAX of the other taps into each anchor row
        anchor_row = hrow(v("i", s) + (p.first(t.i0) + dr - t.a))
        for start, m, src, buf in taps:
            at = {"i": v("i") + start}
            calls.append((IntrinsicCall("alu", blocks + (("i", m), ("j", pw)), anchor_row.substitute(at),
                                        src=src.substitute(at), op=AluOp.MAX), buf, "tile"))
    elif n_out:
        calls += _gather(blocks, "i", n_out, (("j", pw),), t.out_at(compute), taps, POOL_OUT)
    # 3. carry: this tile's last rows pooled along the width, for the next tile of the same blocks
    keep = range(max(t.a, t.b - cr), t.b) if t.b < oh else range(0)
    if keep:
        dst = carry(v("r") + (keep.start - (t.b - cr)))
        src = hrow(v("r") + (keep.start - t.a))
        calls += _gather(blocks, "r", len(keep), (("j", pw),), dst, [(0, len(keep), src, where)], POOL_CARRY)
    # 4. in place: each pooled row into the (now unread) row below its anchor row, compact
    if n_out and dr is not None:
        calls += _gather(blocks, "i", n_out, (("j", pw),), t.out_at(compute), [(0, n_out, anchor_row, "tile")],
                         "tile")
    return calls


def post_calls(compute: ComputeDef, t: PoolTile, steps: tuple[AluStep, ...],
               operands: dict[str, tuple[Region, int]]) -> list[tuple[IntrinsicCall, AluStep]]:
    """The epilogue's tail over the pooled tile (`operands`: tensor -> its tile region and base)."""
    pw = compute.pool.out_size(compute.out.tensor.shape[3])
    n_out = t.i1 - t.i0
    v = Affine.var
    loops = (("n", t.nn), ("c", t.nc), ("i", n_out), ("j", pw))
    dst = t.out_at(compute)
    axes = {"n": v("n") + t.n0, "oc": v("c") + t.c0}
    calls = []
    for step in steps:
        if step.operand is None:
            calls.append((IntrinsicCall("alu", loops, dst, op=step.op, imm=step.imm), step))
        else:
            region, base = operands[step.operand.tensor.name]
            index = tuple(e.substitute(axes) for e in step.operand.index)
            calls.append((IntrinsicCall("alu", loops, dst, src=region.sram_offset(index) + base, op=step.op), step))
    return calls


def tile_order_reason(compute: ComputeDef, tiles: list[Region]) -> str | None:
    """Why the output tiles, in program order, cannot carry the pool's halo (None if they can): every
    tile must hold whole rows, and each block's row tiles must follow each other top to bottom."""
    _, _, oh, ow = compute.out.tensor.shape
    halo = halo_rows(compute.pool, oh, [t.lo[2] for t in tiles])
    next_row: dict[tuple[int, int], int] = {}
    for t in tiles:
        n0, c0, a, x0 = t.lo
        if x0 != 0 or t.count[3] != ow:
            return f"a tile covers columns {x0}..{x0 + t.count[3] - 1} of {ow} (the pool needs whole rows)"
        for n in range(n0, n0 + t.count[0]):
            for c in range(c0, c0 + t.count[1]):
                if next_row.get((n, c), 0) != a:
                    return (f"the row tiles of output block {c} do not come top to bottom in order: rows from "
                            f"{a} follow rows up to {next_row.get((n, c), 0)}")
                next_row[(n, c)] = a + t.count[2]
        if a + t.count[2] < oh and t.count[2] < halo:
            return f"a tile of {t.count[2]} rows is below the pool's {halo} halo rows"
    return None
