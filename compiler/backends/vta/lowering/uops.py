"""Micro-op generation: loops folded into iter_out / iter_in, the rest as a kernel.

An intrinsic call is a loop nest with affine addresses.  Adjacent loops that
walk memory as one merge first (their addresses advance uniformly); the two
outermost remaining loops become the instruction's iter_out / iter_in with the
address coefficients as factors; every other loop is enumerated into the
micro-op kernel.  Kernels are deduplicated by content, stored once in DRAM and
kept resident in the micro-op buffer by `UopCache`, which reloads them only
when they were evicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.lowering.steps import LoweringState, LoweringStep, Phase, register_step
from vtakit.compiler.backends.vta.lowering.tensorize import IntrinsicCall
from vtakit.compiler.backends.vta.lowering.tokens import Record
from vtakit.isa.fields import LOOP_ITER_BITS, mem_layout
from vtakit.isa.insn import Load
from vtakit.isa.opcodes import MemId

MAX_ITER = (1 << LOOP_ITER_BITS) - 1


@dataclass(frozen=True)
class Folded:
    iter_out: int
    iter_in: int
    factors: dict[str, tuple[int, int]]
    """map name (dst, src, wgt) -> (factor_out, factor_in)."""
    kernel: np.ndarray
    """(n, 3) int64: dst, src, wgt of each micro-op."""


def _maps(call: IntrinsicCall) -> dict[str, Affine]:
    return {k: v for k, v in (("dst", call.dst), ("src", call.src), ("wgt", call.wgt)) if v is not None}


def merge_loops(loops: list[tuple[str, int]], maps: dict[str, Affine]) -> list[tuple[str, int]]:
    """Merge an outer loop into the next one when every address advances by the inner
    loop's coefficient times its extent (they then walk memory as one loop)."""
    loops = [lp for lp in loops if lp[1] > 1] or loops[:1]
    out: list[tuple[str, int]] = []
    for name, ext in reversed(loops):
        if out:
            inner_name, inner_ext = out[-1]
            if all(m.coeff(name) == m.coeff(inner_name) * inner_ext for m in maps.values()):
                maps.update({k: m.substitute({name: Affine()}) for k, m in maps.items()})
                out[-1] = (inner_name, inner_ext * ext)
                continue
        out.append((name, ext))
    return list(reversed(out))


def fold(call: IntrinsicCall) -> Folded:
    maps = _maps(call)
    loops = merge_loops(list(call.loops), maps)
    folded, rest = loops[:2], loops[2:]
    while len(folded) < 2:
        folded.append(("", 1))
    for name, ext in folded:
        if ext > MAX_ITER:
            raise CompileError(f"loop {name!r} of {ext} iterations exceeds the {MAX_ITER} an instruction "
                               f"can run; use smaller tiles")
    factors = {k: (m.coeff(folded[0][0]), m.coeff(folded[1][0])) for k, m in maps.items()}
    combos = list(product(*(range(ext) for _, ext in rest)))
    grids = np.array(combos, dtype=np.int64).reshape(len(combos), len(rest))
    kernel = np.zeros((len(grids), 3), dtype=np.int64)
    for col, key in enumerate(("dst", "src", "wgt")):
        m = maps.get(key)
        if m is None:
            continue
        coeffs = np.array([m.coeff(name) for name, _ in rest], dtype=np.int64)
        kernel[:, col] = m.const + grids @ coeffs
    return Folded(folded[0][1], folded[1][1], factors, kernel)


class UopCache:
    """Micro-op kernels resident in the on-chip buffer, and their one copy in DRAM."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._resident: dict[bytes, int] = {}
        self._top = 0
        self._dram: dict[bytes, int] = {}
        self.words: list[np.ndarray] = []
        self._dram_top = 0
        self.loads = 0
        self.evicted = False
        """Whether a kernel was ever evicted.  Until one is, every kernel sits on chip at its DRAM offset,
        so the whole table can be loaded at once (codegen's preload)."""

    def place(self, kernel: np.ndarray) -> tuple[int, int | None]:
        """(on-chip start, DRAM element offset to load it from or None if resident)."""
        key = kernel.tobytes()
        if key in self._resident:
            return self._resident[key], None
        n = len(kernel)
        if n > self.capacity:
            raise CompileError(f"a micro-op kernel of {n} entries does not fit the {self.capacity}-entry "
                               f"micro-op buffer; use smaller tiles")
        if self._top + n > self.capacity:  # evict everything; the compute module runs in order
            self._resident.clear()
            self._top = 0
            self.evicted = True
        start = self._top
        self._top += n
        self._resident[key] = start
        if key not in self._dram:
            self._dram[key] = self._dram_top
            self.words.append(kernel)
            self._dram_top += n
        self.loads += 1
        return start, self._dram[key]

    @property
    def table_size(self) -> int:
        """Entries of the DRAM table: every distinct kernel once."""
        return self._dram_top

    def dram_table(self) -> np.ndarray:
        """All distinct kernels, concatenated: an (n, 3) table of dst, src, wgt."""
        return np.concatenate(self.words) if self.words else np.zeros((0, 3), dtype=np.int64)


def preload(lowering: LoweringState, records: list[Record]) -> list[Record]:
    """AFTER the walk: every micro-op kernel in one LOAD at the start, when none was evicted (each then sits
    on chip at its DRAM offset).  A kernel loaded where it is first used waits for the memory port, which a
    weight DMA holds for thousands of cycles; loaded first, the whole table costs one short transfer."""
    total = lowering.uops.table_size
    if lowering.uops.evicted or total > mem_layout(lowering.cfg)["x_size"].max:
        return records
    kept = [r for r in records if not (isinstance(r.insn, Load) and r.insn.mem == MemId.UOP)]
    if len(kept) == len(records):
        return records
    return [Record(Load(MemId.UOP, 0, 0, 1, total, total), reloc="uops")] + kept


register_step(LoweringStep("uops.preload", Phase.AFTER, preload, order=10,
                           doc="every micro-op kernel in one load at the start, when none was evicted"))
