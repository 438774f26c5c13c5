"""Synthetic instruction streams shaped like compiled convolutions.

Until the compiler exists these give the simulators realistic work: a
double-buffered loop over output tiles in which the load module brings in an
input tile (with convolution padding) and weights, the compute module resets the
accumulators, runs one GEMM per output-channel block over every (input block,
kernel row, kernel column, column) micro-op with the output rows as the outer
loop, requantizes with shift / max / min, and the store module writes the tile
back.  Tokens follow VTA's discipline, so the program is correctly
synchronized: results do not depend on timing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtakit.errors import ConfigError
from vtakit.isa.config import HwConfig
from vtakit.isa.insn import Alu, Gemm, Load, Store
from vtakit.isa.opcodes import AluOp, MemId
from vtakit.isa.image import ProgramBuilder, ProgramImage


@dataclass(frozen=True)
class ConvTile:
    """One output tile: rows x cols pixels, channel blocks in and out, a k x k kernel."""

    rows: int = 14
    cols: int = 14
    cin_blocks: int = 4
    cout_blocks: int = 2
    kernel: int = 3

    @property
    def in_rows(self) -> int:
        return self.rows + self.kernel - 1

    @property
    def in_cols(self) -> int:
        return self.cols + self.kernel - 1

    @property
    def gemm_uops(self) -> int:
        return self.rows * self.cols * self.cin_blocks * self.cout_blocks * self.kernel ** 2


def conv_tiles_program(cfg: HwConfig, tile: ConvTile = ConvTile(), tiles: int = 8,
                       seed: int = 0, shift: int = 8) -> ProgramImage:
    """A program computing `tiles` convolution tiles (same input, fresh outputs)."""
    t = tile
    inp_elems = t.cin_blocks * t.in_rows * t.in_cols
    wgt_elems = t.cout_blocks * t.cin_blocks * t.kernel ** 2
    acc_elems = t.cout_blocks * t.rows * t.cols
    for what, need, have in (("input", 2 * inp_elems, cfg.inp_depth), ("weight", 2 * wgt_elems, cfg.wgt_depth),
                             ("accumulator", 2 * acc_elems, cfg.acc_depth),
                             ("micro-op", 2 * (t.cin_blocks * t.kernel ** 2 * t.cols + 1), cfg.uop_depth)):
        if need > have:
            raise ConfigError(f"a double-buffered tile needs {need} {what} entries, the buffer has {have}",
                              field=f"{what} buffer")
    rng = np.random.default_rng(seed)
    b = ProgramBuilder(cfg, name=f"conv tiles x{tiles}")
    # DRAM input holds the tile without its border; the load pads it.
    x = rng.integers(-128, 128, (t.cin_blocks, t.rows, t.cols, cfg.batch, cfg.block_in), dtype=np.int8)
    w = rng.integers(-128, 128, (wgt_elems, cfg.block_out, cfg.block_in), dtype=np.int8)
    x_addr = b.place_elems(MemId.INP, x.astype(cfg.inp_dtype), name="input")
    w_addr = b.place_elems(MemId.WGT, w.astype(cfg.wgt_dtype), name="weights")
    # Micro-ops per buffer half: (input block, kernel row, kernel column, column);
    # the outer loop walks output channel blocks, the inner loop output rows.
    n_uops = t.cin_blocks * t.kernel ** 2 * t.cols
    uop_sets = []
    for half in range(2):
        inp_base, wgt_base, acc_base = half * inp_elems, half * wgt_elems, half * acc_elems
        uops = [(acc_base + c, inp_base + (ic * t.in_rows + kh) * t.in_cols + kw + c,
                 wgt_base + (ic * t.kernel + kh) * t.kernel + kw)
                for ic in range(t.cin_blocks) for kh in range(t.kernel) for kw in range(t.kernel)
                for c in range(t.cols)]
        uops.append((acc_base, 0, 0))  # single-entry kernel for reset and requantization
        uop_sets.append(b.place_uops(np.array(uops)))
    out_shape = (tiles, t.cout_blocks, t.rows, t.cols, cfg.batch, cfg.block_out)
    out_addr = b.reserve_elems(MemId.OUT, tiles * acc_elems, name="output", shape=out_shape, dtype="|i1")
    pad = (t.kernel - 1) // 2, t.kernel - 1 - (t.kernel - 1) // 2

    for k in range(tiles):
        half = k % 2
        inp_base, wgt_base, acc_base = half * inp_elems, half * wgt_elems, half * acc_elems
        # load module: reuse of this half waits for compute to release it (tile k-2)
        for ic in range(t.cin_blocks):
            b.emit(Load(MemId.INP, inp_base + ic * t.in_rows * t.in_cols, x_addr + ic * t.rows * t.cols,
                        t.rows, t.cols, t.cols, pad[0], pad[1], pad[0], pad[1],
                        pop_next=(k >= 2 and ic == 0)))
        b.emit(Load(MemId.WGT, wgt_base, w_addr, 1, wgt_elems, wgt_elems, push_next=True))
        # compute module: its accumulator half waits for the store of tile k-2
        ubase = half * (n_uops + 1)
        single = ubase + n_uops
        b.emit(Load(MemId.UOP, ubase, uop_sets[half], 1, n_uops + 1, n_uops + 1,
                    pop_prev=True, pop_next=k >= 2))
        b.emit(Gemm(single, single + 1, iter_out=acc_elems, dst_factor_out=1, reset=True))
        b.emit(Gemm(ubase, single, iter_out=t.cout_blocks, iter_in=t.rows,
                    dst_factor_out=t.rows * t.cols, dst_factor_in=t.cols,
                    src_factor_out=0, src_factor_in=t.in_cols,
                    wgt_factor_out=t.cin_blocks * t.kernel ** 2, push_prev=True))
        for op, imm in ((AluOp.SHR, shift), (AluOp.MAX, -128), (AluOp.MIN, 127)):
            b.emit(Alu(op, single, single + 1, iter_out=acc_elems, dst_factor_out=1, use_imm=True,
                       imm=imm, push_next=op == AluOp.MIN))
        # store module
        b.emit(Store(MemId.OUT, acc_base, out_addr + k * acc_elems, 1, acc_elems, acc_elems,
                     pop_prev=True, push_prev=True))
    # The last two tiles' buffer releases are still queued.
    b.finish(load_pops=min(tiles, 2), compute_pops=min(tiles, 2))
    return b.build()


def conv_tiles_expected(image: ProgramImage, tile: ConvTile, shift: int = 8) -> np.ndarray:
    """What `conv_tiles_program` must write to its "output" region, computed with numpy."""
    t = tile
    x = image.read("input").astype(np.int64)       # (cin, rows, cols, batch, block_in)
    w = image.read("weights").astype(np.int64)     # (cout*cin*k*k, block_out, block_in)
    tiles = image.regions["output"].shape[0]
    lo = (t.kernel - 1) // 2
    xp = np.zeros((t.cin_blocks, t.in_rows, t.in_cols) + x.shape[3:], dtype=np.int64)
    xp[:, lo:lo + t.rows, lo:lo + t.cols] = x
    w = w.reshape(t.cout_blocks, t.cin_blocks, t.kernel, t.kernel, *w.shape[1:])
    acc = np.zeros((t.cout_blocks, t.rows, t.cols, x.shape[3], w.shape[-2]), dtype=np.int64)
    for kh in range(t.kernel):
        for kw in range(t.kernel):
            window = xp[:, kh:kh + t.rows, kw:kw + t.cols]      # (cin, r, c, b, i)
            acc += np.einsum("ircbk,oiqk->orcbq", window, w[:, :, kh, kw])
    acc = acc.astype(np.int32).astype(np.int64)  # int32 wraparound of the accumulator
    out = np.clip(acc >> shift, -128, 127).astype(np.int8)
    return np.broadcast_to(out, (tiles,) + out.shape).copy()
