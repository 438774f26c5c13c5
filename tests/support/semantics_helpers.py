"""Helpers for hand-written semantics tests: a program builder that adds the standard
tokens, numpy versions of the accumulator arithmetic, and a check that runs both
simulator models and the reference interpreter (tests/support/reference.py) against expected
values.  Accumulator values wider than the 8-bit output are observed with
`Prog.dump32`, which copies them and stores their four bytes separately (SHR by 0, 8,
16, 24; it uses ALU reset and the 6-bit SHR amount, so only on extended configs).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import vtakit.sim as sim
from tests.support.reference import reference_image
from vtakit.isa import Alu, AluOp, Finish, HwConfig, Insn, Load, MemId, Store, Uop
from vtakit.isa.image import ProgramBuilder, ProgramImage
MODELS = ["functional", "cycle"]
PRESETS = ["pynq", "2x16"]  # batch 1 and batch 2
"""Run with every extension on (config()): these tests pin vtakit's extended semantics;
VTA's own (the pynq preset as it is) are pinned by test_vta_semantics.py."""
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def config(preset: str) -> HwConfig:
    """The preset with all of vtakit's extensions (see HwConfig.extensions) switched on."""
    from vtakit.isa.config import EXTENSION_FIELDS

    return HwConfig.preset(preset).replace(**dict.fromkeys(EXTENSION_FIELDS, True))


# ------------------------------------------------------------------ arithmetic
def wrap(values, bits: int) -> np.ndarray:
    """Two's complement wrap to `bits` bits, as int64."""
    v = np.asarray(values, dtype=np.int64)
    return (v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))


def wrap32(values) -> np.ndarray:
    return wrap(values, 32)


def to_int8(values) -> np.ndarray:
    return wrap(values, 8).astype(np.int8)


def shr_amount(operand) -> np.ndarray:
    """The SHR amount an operand gives: its low 6 bits read as a signed number."""
    low = np.asarray(operand, dtype=np.int64) & 63
    return np.where(low >= 32, low - 64, low)


def shr32(a, operand) -> np.ndarray:
    """int32 SHR: arithmetic right shift, or left shift (wrapping) for a negative amount."""
    a = np.asarray(a, dtype=np.int64)
    amount = np.broadcast_to(shr_amount(operand), a.shape)
    right = a >> np.clip(amount, 0, 31)
    left = wrap32(a << np.clip(-amount, 0, 32))
    return np.where(amount >= 0, right, left)


# ------------------------------------------------------------- program helper
class Prog:
    """A program under construction: the three modules' instructions and their data.

    `build` adds the standard tokens: the last load-module instruction pushes to
    compute and the first compute instruction pops it; the last compute
    instruction pushes to store and the first STORE pops it; the last STORE
    pushes back to compute and the final FINISH pops that.
    """

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.b = ProgramBuilder(cfg)
        self.loads: list[Insn] = []
        self.compute: list[Insn] = []
        self.stores: list[Insn] = []
        self._acc32: set[str] = set()
        self._scratch_top = cfg.acc_depth  # dump32 scratch grows down from the top of ACC
        self._uop_top = cfg.uop_depth  # and its micro-ops from the top of the UOP buffer

    # lane shapes of one element
    def acc_shape(self, n: int) -> tuple[int, int, int]:
        return (n, self.cfg.batch, self.cfg.block_out)

    def inp_shape(self, n: int) -> tuple[int, int, int]:
        return (n, self.cfg.batch, self.cfg.block_in)

    def wgt_shape(self, n: int) -> tuple[int, int, int]:
        return (n, self.cfg.block_out, self.cfg.block_in)

    # data placement and contiguous loads
    def place(self, mem: MemId, data: np.ndarray, name: str | None = None) -> int:
        dtype = {MemId.INP: "<i1", MemId.WGT: "<i1", MemId.ACC: "<i4",
                 MemId.ACC_8BIT: "<i1", MemId.OUT: "<i1"}[mem]
        return self.b.place_elems(mem, np.asarray(data).astype(dtype), name=name)

    def load(self, mem: MemId, sram: int, data: np.ndarray) -> None:
        """A plain LOAD of all of `data` to consecutive entries from `sram`."""
        n = len(data)
        insn = Load(mem, sram, self.place(mem, data), 1, n, n)
        (self.loads if mem in (MemId.INP, MemId.WGT) else self.compute).append(insn)

    def load_uops(self, sram: int, uops: list[Uop]) -> None:
        self.compute.append(Load(MemId.UOP, sram, self.b.place_uops(uops), 1, len(uops), len(uops)))

    # observation
    def store_out(self, sram: int, n: int, name: str) -> None:
        """STORE acc[sram:sram+n] (truncated to int8) into a fresh OUT region."""
        addr = self.b.reserve_elems(MemId.OUT, n, name=name, shape=self.acc_shape(n), dtype="|i1")
        self.stores.append(Store(MemId.OUT, sram, addr, 1, n, n))

    def dump32(self, sram: int, n: int, name: str) -> None:
        """Make acc[sram:sram+n] observable in full 32 bits as region `name` (see `result`)."""
        self._scratch_top -= 4 * n
        self._uop_top -= 5
        scratch, u = self._scratch_top, self._uop_top
        assert scratch >= sram + n, "dump32 scratch would overlap the dumped entries"
        # uop u copies (with the loops below) acc[sram + j] to scratch[k*n + j];
        # uop u+1+k addresses scratch[k*n + j] for the per-byte shifts.
        self.load_uops(u, [Uop(scratch, sram)] + [Uop(scratch + k * n) for k in range(4)])
        copy = dict(iter_out=4, iter_in=n, dst_factor_out=n, dst_factor_in=1, src_factor_in=1)
        self.compute.append(Alu(AluOp.ADD, u, u + 1, reset=True, **copy))
        self.compute.append(Alu(AluOp.ADD, u, u + 1, **copy))
        for k in range(1, 4):
            self.compute.append(Alu(AluOp.SHR, u + 1 + k, u + 2 + k, iter_in=n, dst_factor_in=1,
                                    use_imm=True, imm=8 * k))
        addr = self.b.reserve_elems(MemId.OUT, 4 * n, name=name,
                                    shape=(4,) + self.acc_shape(n), dtype="|i1")
        self.stores.append(Store(MemId.OUT, scratch, addr, 1, 4 * n, 4 * n))
        self._acc32.add(name)

    def result(self, img: ProgramImage, name: str, dram: np.ndarray) -> np.ndarray:
        """Region `name` after a run: int8 as stored, or int32 for a dump32 region."""
        raw = img.read(name, dram)
        if name not in self._acc32:
            return raw
        octets = raw.astype(np.uint8).astype(np.int64)
        return wrap32(sum(octets[k] << (8 * k) for k in range(4))).astype(np.int32)

    def build(self) -> ProgramImage:
        loads, compute, stores = list(self.loads), list(self.compute), list(self.stores)
        assert compute and stores, "every test program computes and stores something"
        if loads:
            loads[-1] = dataclasses.replace(loads[-1], push_next=True)
            compute[0] = dataclasses.replace(compute[0], pop_prev=True)
        compute[-1] = dataclasses.replace(compute[-1], push_next=True)
        stores[0] = dataclasses.replace(stores[0], pop_prev=True)
        stores[-1] = dataclasses.replace(stores[-1], push_prev=True)
        self.b.emit(*loads, *compute, *stores, Finish(pop_next=True))
        return self.b.build()


def check(p: Prog, model: str, expected: dict[str, np.ndarray]) -> tuple[object, dict[str, np.ndarray]]:
    """Run on `model` and on the reference; both must give `expected` and the same DRAM.

    Returns the simulator's stats and its results by region name.
    """
    img = p.build()
    stats, dram = sim.run_image(img, model=model)
    ref = reference_image(img)
    got = {}
    for name, want in expected.items():
        got[name] = p.result(img, name, dram)
        np.testing.assert_array_equal(got[name], want, err_msg=f"{model} simulator, region {name!r}")
        np.testing.assert_array_equal(p.result(img, name, ref), want,
                                      err_msg=f"reference interpreter, region {name!r}")
    np.testing.assert_array_equal(dram, ref, err_msg=f"{model} simulator and reference DRAM differ")
    assert (stats.cycles is None) == (model == "functional")
    return stats, got


def rand_acc(rng: np.random.Generator, shape, low: int = INT32_MIN, high: int = INT32_MAX) -> np.ndarray:
    return rng.integers(low, high, size=shape, endpoint=True, dtype=np.int64)


def rand_i8(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.integers(-128, 127, size=shape, endpoint=True, dtype=np.int64)


def identity_wgt(cfg: HwConfig) -> np.ndarray:
    """One WGT element that makes GEMM copy an INP element into the accumulator."""
    assert cfg.block_in == cfg.block_out
    return np.eye(cfg.block_in, dtype=np.int64)[None]
