"""Tile regions (compiler/regions.py) and DMA planning (compiler/passes/dma.py)."""

import re
from itertools import product

import pytest
from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.lowering.dma import Fill, Transfer, plan_transfers
from vtakit.compiler.backends.vta.regions import Region, region_of, substitute_box
from vtakit.compiler.backends.vta.te import conv2d_def
from vtakit.isa.config import HwConfig

from vtakit.errors import CompileError

CFG = HwConfig.preset("pynq")
v = Affine.var


def norm(e):
    return dict(e.terms), e.const


def conv3x3():
    # data (1, 2, 6, 6) INP blocks, weight (2, 2, 3, 3), out (1, 2, 6, 6)
    return conv2d_def(CFG, n=1, c_in=32, h=6, w=6, c_out=32, kh=3, kw=3, pad=1)


# An edge tile of the 3x3 convolution: output rows 4, 5 and columns 0..3, both input-channel blocks.
EDGE = {"n": (0, 1), "oc": (0, 1), "oh": (4, 2), "ow": (0, 4), "ic": (0, 2), "kh": (0, 3), "kw": (0, 3)}


# ------------------------------------------------------------------ regions
def test_region_padded_3x3_input():
    c = conv3x3()
    r = region_of(c.data, EDGE)
    # rows oh + kh - 1 over oh 4..5, kh 0..2: 3..6 (row 6 is padding); cols -1..4 (col -1 is padding)
    assert r.lo == (0, 0, 3, -1)
    assert r.count == (1, 2, 4, 6)
    assert r.step == (1, 1, 1, 1)
    assert r.shape == (1, 2, 6, 6)
    assert r.size == 48 and r.strides == (48, 24, 6, 1)
    assert r.pads(2) == (0, 1) and r.pads(3) == (1, 0) and r.pads(1) == (0, 0)


def test_region_weights_and_output():
    c = conv3x3()
    w = region_of(c.weight, EDGE)
    assert (w.lo, w.count, w.step) == ((0, 0, 0, 0), (1, 2, 3, 3), (1, 1, 1, 1))
    o = region_of(c.out, EDGE)
    assert (o.lo, o.count) == ((0, 0, 4, 0), (1, 1, 2, 4))
    assert o.strides == (8, 8, 4, 1)


def test_region_1x1_stride2_input_rows_strided():
    # 1x1 stride 2 on 8x8 -> 4x4 outputs; a tile of output rows 2..3, all 4 columns
    c = conv2d_def(CFG, n=1, c_in=16, h=8, w=8, c_out=16, kh=1, kw=1, stride=2)
    box = {"n": (0, 1), "oc": (0, 1), "oh": (2, 2), "ow": (0, 4), "ic": (0, 1), "kh": (0, 1), "kw": (0, 1)}
    r = region_of(c.data, box)
    # rows 2*oh: 4 and 6 -> lo 4, step 2, count 2; the last dim stays dense: cols 0..6 -> 7
    assert (r.lo, r.count, r.step) == ((0, 0, 4, 0), (1, 1, 2, 7), (1, 1, 2, 1))
    assert r.size == 14
    # on-chip offset of data[n, ic, 2*oh + kh, 2*ow + kw] with oh = 2 + oh.i, ow = ow.i:
    # row (2*oh.i + 4 - 4) / 2 = oh.i times 7, col 2*ow.i
    idx = substitute_box(c.data, box, {"oh": "oh.i", "ow": "ow.i"})
    assert norm(r.sram_offset(idx)) == ({"oh.i": 7, "ow.i": 2}, 0)


def test_region_strided_rows_become_dense_with_padding():
    # stride 2 with padding 1 (3x3 kernel would be dense anyway; 1x1 with pad keeps padding): rows
    # 2*oh - 1 for oh 0..1 -> -1, 1: padding involved, so the region stays dense (step 1, 3 rows)
    c = conv2d_def(CFG, n=1, c_in=16, h=4, w=4, c_out=16, kh=1, kw=1, stride=2, pad=1)
    box = {"n": (0, 1), "oc": (0, 1), "oh": (0, 2), "ow": (0, 1), "ic": (0, 1), "kh": (0, 1), "kw": (0, 1)}
    r = region_of(c.data, box)
    assert (r.lo[2], r.count[2], r.step[2]) == (-1, 3, 1)
    assert r.pads(2) == (1, 0)


def test_sram_offset_padded_input():
    c = conv3x3()
    r = region_of(c.data, EDGE)
    idx = substitute_box(c.data, EDGE, {"oh": "oh.i", "ow": "ow.i", "ic": "ic.i", "kh": "kh", "kw": "kw"})
    # data[0, ic.i, oh.i + 4 + kh - 1, ow.i + kw - 1] minus lo (0, 0, 3, -1):
    # (0, ic.i, oh.i + kh, ow.i + kw) . (48, 24, 6, 1)
    assert norm(r.sram_offset(idx)) == ({"ic.i": 24, "oh.i": 6, "kh": 6, "ow.i": 1, "kw": 1}, 0)
    # axes without an inner loop are fixed at their start (kh, kw here: kh, kw at 0)
    idx = substitute_box(c.data, EDGE, {"oh": "oh.i", "ow": "ow.i", "ic": "ic.i"})
    assert norm(r.sram_offset(idx)) == ({"ic.i": 24, "oh.i": 6, "ow.i": 1}, 0)
    # axes of length 1 are fixed at their start: oc, n do not appear
    idx = substitute_box(c.out, EDGE, {"oh": "oh.i", "ow": "ow.i"})
    assert norm(region_of(c.out, EDGE).sram_offset(idx)) == ({"oh.i": 4, "ow.i": 1}, 0)


def test_pads_clamped_to_count():
    r = Region(lo=(-5,), count=(3,), step=(1,), shape=(4,))
    assert r.pads(0) == (3, 0)
    r = Region(lo=(3,), count=(4,), step=(1,), shape=(4,))
    assert r.pads(0) == (0, 3)


# ------------------------------------------------------------------ transfers
def test_weights_coalesce_per_output_channel_block():
    # weight (ocb 2, icb 4, 3, 3); a tile of both oc blocks and ic blocks 2..3: kh, kw are full, so
    # each oc block is one contiguous run of 2 * 9 = 18 elements starting at 2 * 9, rows 4 * 9 apart
    c = conv2d_def(CFG, n=1, c_in=64, h=6, w=6, c_out=32, kh=3, kw=3, pad=1)
    box = {"n": (0, 1), "oc": (0, 2), "oh": (0, 6), "ow": (0, 6), "ic": (2, 2), "kh": (0, 3), "kw": (0, 3)}
    r = region_of(c.weight, box)
    assert (r.lo, r.count) == ((0, 2, 0, 0), (2, 2, 3, 3))
    transfers, fills = plan_transfers(r, 10, what="w")
    assert transfers == [Transfer(sram_base=10, dram_offset=18, y_size=2, x_size=18, x_stride=36)]
    assert fills == []
    # with every ic block the whole tensor is one run of 2 * 4 * 9 = 72
    box["ic"] = (0, 4)
    transfers, _ = plan_transfers(region_of(c.weight, box), 0, what="w")
    assert transfers == [Transfer(0, 0, 1, 72, 72)]


def test_padded_input_tile_transfers():
    c = conv3x3()
    r = region_of(c.data, EDGE)
    transfers, _ = plan_transfers(r, 100, what="data")
    # per ic block (dims n, ic are full but sit before the 2-D window): rows 3..5 of data (3 rows,
    # 1 row padding below), cols 0..5 (5 columns loaded, 1 padding left) of a 6-wide image.
    # dram: ic * 36 + 3 * 6; sram: 100 + ic * 24 (the on-chip tile is 4 x 6 per block)
    assert transfers == [
        Transfer(100, 18, 3, 5, 6, y_pad_0=0, y_pad_1=1, x_pad_0=1, x_pad_1=0),
        Transfer(124, 54, 3, 5, 6, y_pad_0=0, y_pad_1=1, x_pad_0=1, x_pad_1=0),
    ]


def test_interior_input_tile_has_no_padding():
    c = conv3x3()
    box = dict(EDGE, oh=(1, 2), ow=(1, 4), ic=(1, 1))
    r = region_of(c.data, box)          # rows 0..3, cols 0..5 -> the columns are full, rows partial
    assert (r.lo, r.count) == ((0, 1, 0, 0), (1, 1, 4, 6))
    transfers, fills = plan_transfers(r, 0, what="data")
    # rows 0..3 of ic block 1 with whole rows: one run of 4 * 6 = 24 at 36 (x is dim 2, y the
    # ic dim: a single row, whose stride is the ic block's 36)
    assert transfers == [Transfer(0, 36, 1, 24, 36)] and fills == []


def test_strided_rows_transfer():
    # 1x1 stride 2 on 8x8: rows 4, 6 (step 2), cols 0..6 of 8: x = 7 elements, rows 2 * 8 apart
    c = conv2d_def(CFG, n=1, c_in=16, h=8, w=8, c_out=16, kh=1, kw=1, stride=2)
    box = {"n": (0, 1), "oc": (0, 1), "oh": (2, 2), "ow": (0, 4), "ic": (0, 1), "kh": (0, 1), "kw": (0, 1)}
    transfers, _ = plan_transfers(region_of(c.data, box), 5, what="data")
    assert transfers == [Transfer(5, 32, 2, 7, 16)]
    # 7x7 image, stride 2: columns 0..6 are the whole row; rows 0, 2 of 7 -> strided whole rows
    c = conv2d_def(CFG, n=1, c_in=16, h=7, w=7, c_out=16, kh=1, kw=1, stride=2)
    box = {"n": (0, 1), "oc": (0, 1), "oh": (0, 2), "ow": (0, 4), "ic": (0, 1), "kh": (0, 1), "kw": (0, 1)}
    r = region_of(c.data, box)
    assert (r.lo, r.count, r.step) == ((0, 0, 0, 0), (1, 1, 2, 7), (1, 1, 2, 1))
    transfers, _ = plan_transfers(r, 0, what="data")
    assert transfers == [Transfer(0, 0, 2, 7, 14)]


def test_padding_outside_last_two_dims_raises():
    # partial dims 1 (padded), 2 and 3: the 2-D window is dims 2, 3
    r = Region(lo=(0, -1, 0, -1), count=(1, 3, 2, 5), step=(1, 1, 1, 1), shape=(1, 2, 4, 4))
    with pytest.raises(CompileError, match=re.escape("t: padding in dimension 1 cannot be expressed by a 2-D DMA")):
        plan_transfers(r, 0, what="t")


def test_store_cannot_pad():
    c = conv3x3()
    r = region_of(c.data, EDGE)
    with pytest.raises(CompileError, match=re.escape("out: a STORE cannot pad")):
        plan_transfers(r, 0, what="out", allow_pad=False)
    # without padding a store plan is fine
    o = region_of(c.out, EDGE)
    transfers, _ = plan_transfers(o, 3, what="out", allow_pad=False)
    assert transfers == [Transfer(3, 24, 2, 4, 6)]       # rows 4, 5 of 6-wide out: 4 * 6 = 24


def test_tile_entirely_in_padding_raises():
    r = Region(lo=(-3,), count=(2,), step=(1,), shape=(4,))
    with pytest.raises(CompileError, match="a tile lies entirely in the padding"):
        plan_transfers(r, 0, what="t")


@pytest.mark.parametrize("region, field, value", [
    # 70000 rows of whole... the row dim partial: y = 70000 rows of 1 element
    (Region((0, 0), (70000, 1), (1, 1), (70000, 2)), "y_size", 70000),
    # one contiguous run of 70000 elements
    (Region((0,), (70000,), (1,), (70000,)), "x_size", 70000),
    # rows 70000 elements apart with a padding row above (unpadded ones split: below)
    (Region((-1, 0), (3, 1), (1, 1), (2, 70000)), "x_stride", 70000),
    # 16 padding rows above
    (Region((-16, 0), (18, 2), (1, 1), (2, 4)), "y_pad", 16),
    # 16 padding elements before a row
    (Region((0, -16), (1, 18), (1, 1), (1, 4)), "x_pad", 16),
])
def test_fields_beyond_their_widths(region, field, value):
    with pytest.raises(CompileError, match=re.escape(f"t: {field} {value} exceeds the instruction field's")):
        plan_transfers(region, 0, what="t")


def test_rows_too_far_apart_for_the_stride_field_become_a_transfer_each():
    # two channel blocks of a 280 x 256 map, 4 rows of each: 71,680 elements between them
    r = Region((0, 8, 0), (2, 4, 256), (1, 1, 1), (2, 280, 256))
    transfers, fills = plan_transfers(r, 5, what="t")
    assert transfers == [Transfer(5, 8 * 256, 1, 4 * 256, 4 * 256),
                         Transfer(5 + 4 * 256, 280 * 256 + 8 * 256, 1, 4 * 256, 4 * 256)]
    assert fills == []


def test_limits_are_inclusive():
    # exactly 15 padding elements and 65535 rows are fine
    transfers, _ = plan_transfers(Region((0, -15), (1, 17), (1, 1), (1, 4)), 0, what="t")
    assert transfers[0].x_pad_0 == 15
    transfers, _ = plan_transfers(Region((0, 0), (65535, 1), (1, 1), (65535, 2)), 0, what="t")
    assert transfers[0].y_size == 65535


def fill_entries(fills):
    out = []
    for f in fills:
        out += [f.base + o * f.factor + u for o in range(f.iters) for u in f.offsets]
    return out


def padded_entries(region, base):
    """On-chip entries of `region` (row-major copy at `base`) whose tensor index is outside the tensor."""
    out = []
    for pos in product(*(range(n) for n in region.count)):
        idx = [lo + i * s for lo, i, s in zip(region.lo, pos, region.step)]
        if any(not 0 <= x < n for x, n in zip(idx, region.shape)):
            out.append(base + sum(i * s for i, s in zip(pos, region.strides)))
    return out


@pytest.mark.parametrize("box_change", [
    {},                                        # bottom + left
    {"oh": (0, 2), "ow": (2, 4)},              # top + right
    {"oh": (0, 6), "ow": (0, 6)},              # all four sides
    {"oh": (2, 2), "ow": (1, 4)},              # none
])
def test_fills_are_exactly_the_padding(box_change):
    c = conv3x3()
    r = region_of(c.data, dict(EDGE, **box_change))
    base = 40
    _, fills = plan_transfers(r, base, what="data")
    got = fill_entries(fills)
    assert len(got) == len(set(got)), "fill runs overlap"
    assert sorted(got) == padded_entries(r, base)
    assert all(isinstance(f, Fill) for f in fills)


def test_fill_runs_by_hand():
    c = conv3x3()
    r = region_of(c.data, EDGE)         # per block: 4 rows x 6 cols, last row and first col padding
    _, fills = plan_transfers(r, 0, what="data")
    assert fills == [
        Fill(18, 6, 1, (0,)),            # bottom row of block 0: entries 18..23
        Fill(0, 3, 6, (0,)),             # left column of the 3 data rows: 0, 6, 12
        Fill(24 + 18, 6, 1, (0,)),       # block 1
        Fill(24, 3, 6, (0,)),
    ]


def test_partial_outer_dims_repeat_the_transfer():
    # 2 batch blocks; the tile takes batch block 1 only, both ic blocks: transfers per ic block at
    # dram 1 * 72 + ic * 36 + 3 * 6 (72 = 2 * 6 * 6 per batch block)
    r = Region(lo=(1, 0, 3, -1), count=(1, 2, 4, 6), step=(1, 1, 1, 1), shape=(2, 2, 6, 6))
    transfers, _ = plan_transfers(r, 0, what="data")
    assert [(t.sram_base, t.dram_offset) for t in transfers] == [(0, 90), (24, 126)]
    # strided outer dim: batch blocks 0 and 2 of 3 (step 2), one ic block (1) of 2
    r = Region(lo=(0, 1, 0, 0), count=(2, 1, 2, 6), step=(2, 1, 1, 1), shape=(3, 2, 6, 6))
    transfers, _ = plan_transfers(r, 0, what="data")
    # cols 0..5 are full and rows 0..1 partial, so x is dim 2 (2 rows x 6 = 12 contiguous), y the ic
    # dim (1 row, stride 36); the strided batch dim repeats the transfer: dram 0 * 72 + 36 and
    # 2 * 72 + 36, sram 0 and 12 (one batch index of the on-chip copy is 1 * 2 * 6 entries)
    assert transfers == [Transfer(0, 36, 1, 12, 36), Transfer(12, 180, 1, 12, 36)]


def test_fills_with_whole_trailing_dims():
    # padding in a channel-like dim followed by full dims: each padded index is 2 * 3 = 6 entries
    r = Region(lo=(0, -1, 0, 0), count=(1, 4, 2, 3), step=(1, 1, 1, 1), shape=(1, 2, 2, 3))
    transfers, fills = plan_transfers(r, 8, what="t")
    # x is dim 1: 2 data indices x 6 = 12, padded 6 before and 6 after
    assert transfers == [Transfer(8, 0, 1, 12, 12, x_pad_0=6, x_pad_1=6)]
    assert fills == [Fill(8, 1, 24, tuple(range(6))), Fill(8 + 6 + 12, 1, 24, tuple(range(6)))]
    got = fill_entries(fills)
    assert len(got) == len(set(got)) and sorted(got) == padded_entries(r, 8)
