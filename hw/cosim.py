"""Co-simulation: one program image on the functional model, the cycle model and the RTL.

The functional model is the reference for data, the RTL the reference for time.
`cosim` runs all three on copies of the image's DRAM and reports whether the
final DRAMs agree byte for byte; on a mismatch it names the first differing byte
the way a hardware engineer would chase it: the STORE that wrote it, the output
buffer entry and lane it came from, the named region and index it lands in, and
the expected and observed lane values.  Cycle counts of the cycle model and the
RTL are reported side by side.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from vtakit.errors import VtaError
from vtakit.isa.opcodes import MemId, Opcode
from vtakit.isa.image import ProgramImage
from vtakit.sim import run_image
from vtakit.sim.decoded import decode_for_sim

MODELS = ("functional", "cycle", "rtl")


@dataclass(frozen=True)
class ModelRun:
    model: str
    cycles: int | None       # None for the untimed functional model or a failed run
    wall_s: float | None
    error: str | None        # the one-line error if the run failed


@dataclass(frozen=True)
class Mismatch:
    """The first DRAM byte where `model` differs from the functional model."""

    model: str
    byte: int
    insn_index: int | None   # the last STORE that wrote this byte (None: no STORE did)
    buffer: str | None       # on-chip buffer the STORE read ("out")
    element: int | None      # entry of that buffer
    lane: int | None         # lane within the entry (batch * block_out + column)
    region: str | None       # named image region and index, e.g. "output[0, 2, 5, 1]"
    expected: int            # the lane's value (signed, out_bits wide) on the functional model
    got: int                 # ... and on `model`
    differing_bytes: int     # how many bytes differ in all


@dataclass(frozen=True)
class CosimReport:
    program: str
    config: str
    runs: tuple[ModelRun, ...]
    mismatches: tuple[Mismatch, ...]

    @property
    def agree(self) -> bool:
        return not self.mismatches and all(r.error is None for r in self.runs)

    @property
    def cycle_error(self) -> float | None:
        """(cycle model - RTL) / RTL cycles, the cycle model's timing error."""
        by = {r.model: r.cycles for r in self.runs}
        if by.get("cycle") and by.get("rtl"):
            return (by["cycle"] - by["rtl"]) / by["rtl"]
        return None

    def to_dict(self) -> dict:
        return {"program": self.program, "config": self.config, "agree": self.agree,
                "cycle_error": self.cycle_error, "runs": [asdict(r) for r in self.runs],
                "mismatches": [asdict(m) for m in self.mismatches]}


def cosim(image: ProgramImage, models: tuple[str, ...] = MODELS, timeout_s: float | None = None) -> CosimReport:
    """Run `image` on each model and compare the final DRAMs with the first model's."""
    runs, drams = [], {}
    for model in models:
        try:
            stats, dram = run_image(image, model=model, timeout_s=timeout_s)
        except VtaError as e:
            runs.append(ModelRun(model, None, None, str(e)))
            continue
        runs.append(ModelRun(model, stats.cycles if model != "functional" else None, round(stats.wall_s, 3), None))
        drams[model] = dram
    mismatches = []
    reference = models[0]
    if reference in drams:
        for model in models[1:]:
            if model in drams:
                diff = np.flatnonzero(drams[model] != drams[reference])
                if diff.size:
                    mismatches.append(_explain(image, model, int(diff[0]), int(diff.size), drams[reference],
                                               drams[model]))
    return CosimReport(image.name or "program", image.config.label, tuple(runs), tuple(mismatches))


def _explain(image: ProgramImage, model: str, byte: int, count: int, expected: np.ndarray,
             got: np.ndarray) -> Mismatch:
    cfg = image.config
    eb = cfg.elem_bytes(MemId.OUT)
    lane_bytes = max(1, cfg.out_bits // 8)
    insn, element = _last_store_of(image, byte, eb)
    elem_start = byte - byte % eb
    lane = (byte % eb) // lane_bytes
    start = elem_start + lane * lane_bytes if insn is not None else byte - byte % lane_bytes
    return Mismatch(model=model, byte=byte, insn_index=insn, buffer="out" if insn is not None else None,
                    element=element, lane=lane if insn is not None else None, region=_region_of(image, byte),
                    expected=_signed(expected[start:start + lane_bytes]), got=_signed(got[start:start + lane_bytes]),
                    differing_bytes=count)


def _last_store_of(image: ProgramImage, byte: int, eb: int) -> tuple[int | None, int | None]:
    """(instruction index, output buffer entry) of the last STORE writing DRAM `byte`."""
    prog = decode_for_sim(image.config, image.dram.copy(), image.insn_addr, image.insn_count)
    mem = prog.mem
    target = byte // eb
    for i in np.flatnonzero(prog.opcode == Opcode.STORE)[::-1]:
        y_size, x_size, stride = int(mem["y_size"][i]), int(mem["x_size"][i]), int(mem["x_stride"][i])
        offset = target - int(mem["dram_base"][i])
        if offset < 0 or x_size == 0 or y_size == 0:
            continue
        # rows are written in order, so of overlapping rows the last one covering the byte wins
        last_row = min(y_size - 1, offset // stride if stride else y_size - 1)
        for y in range(last_row, -1, -1):
            x = offset - y * stride
            if x >= x_size:
                break
            if 0 <= x:
                return int(i), int(mem["sram_base"][i]) + y * x_size + x
    return None, None


def _region_of(image: ProgramImage, byte: int) -> str | None:
    for name, region in image.regions.items():
        if region.addr <= byte < region.addr + region.nbytes:
            item = (byte - region.addr) // np.dtype(region.dtype).itemsize
            index = ", ".join(str(int(v)) for v in np.unravel_index(item, region.shape))
            return f"{name}[{index}]"
    return None


def _signed(data: np.ndarray) -> int:
    return int.from_bytes(data.tobytes(), "little", signed=True)
