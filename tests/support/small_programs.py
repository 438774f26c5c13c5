"""Hand-written test programs: a few instructions, optionally after a LOAD of their micro-ops."""

import numpy as np

from vtakit.isa import HwConfig, Load, MemId
from vtakit.isa.image import ProgramBuilder, ProgramImage


def small_image(insns, cfg: HwConfig | None = None, uops=None) -> ProgramImage:
    """`insns` in an image with some input entries in DRAM; with `uops`, a LOAD.UOP of them
    comes first (so instruction indices shift by one)."""
    b = ProgramBuilder(cfg or HwConfig.preset("pynq"))
    if uops is not None:
        addr = b.place_uops(uops)
        insns = [Load(MemId.UOP, 0, addr, 1, len(uops), len(uops)), *insns]
    b.place_elems(MemId.INP, np.zeros((4, 1, 16), np.int8))
    b.emit(*insns)
    return b.build()
