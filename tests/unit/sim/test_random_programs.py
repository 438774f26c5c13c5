"""Random synchronized programs: both models agree with each other and with the
independent reference interpreter (tests/support/reference.py), byte for byte."""

import numpy as np
import pytest
from tests.support.reference import reference_image

import vtakit.sim as sim
from vtakit.isa import Alu, AluOp, Gemm, HwConfig, Load, MemId, Store
from vtakit.sim import plans
from vtakit.sim.random_programs import random_program

SEEDS = {"pynq": range(150), "1x8": range(50), "2x16": range(50), "1x32": range(30)}
# Configurations no preset uses: wide elements, a narrow accumulator, odd shapes.
CUSTOM = {
    "i16w16": HwConfig.preset("1x8").replace(inp_bits=16, wgt_bits=16),
    "acc16": HwConfig.preset("1x8").replace(acc_bits=16),
    "out16": HwConfig.preset("1x8").replace(inp_bits=16, out_bits=16),
    "4x8x8": HwConfig.preset("1x8").replace(batch=4),
    "1x16x32": HwConfig.preset("1x8").replace(block_in=16, block_out=32, wgt_buff_bytes=1 << 17),
}
CASES = [(HwConfig.preset(n), s) for n, seeds in SEEDS.items() for s in seeds]
CASES += [(cfg, s) for cfg in CUSTOM.values() for s in range(12)]


def _check(img):
    expected = reference_image(img)
    fstats, fdram = sim.run_image(img, model="functional")
    cstats, cdram = sim.run_image(img, model="cycle")
    for model, dram in (("functional", fdram), ("cycle", cdram)):
        diff = np.flatnonzero(dram != expected)
        assert diff.size == 0, f"{model}: first differing byte {diff[0]:#x}"
    assert (fstats.gemm_uops, fstats.alu_uops, fstats.insns) == \
        (cstats.gemm_uops, cstats.alu_uops, cstats.insns)
    assert cstats.cycles > 0


@pytest.mark.parametrize("cfg, seed", CASES, ids=[f"{c.label}-{s}" for c, s in CASES])
def test_models_match_reference(cfg, seed):
    _check(random_program(cfg, seed))


@pytest.mark.parametrize("seed", range(20))
def test_chunked_loops_keep_sequential_semantics(seed, monkeypatch):
    """Long loops run in pieces; cutting every few micro-ops must not change results."""
    monkeypatch.setattr(plans, "_CHUNK_UOPS", 5)
    _check(random_program(HwConfig.preset("pynq"), 1000 + seed))


def test_generator_exercises_every_feature():
    """Across a few seeds the generator emits every instruction kind and hazard."""
    cfg = HwConfig.preset("1x8")
    seen = set()
    for seed in range(20):
        for insn in random_program(cfg, seed).instructions():
            if isinstance(insn, Load):
                seen.add(f"load {MemId(insn.mem).name}")
                if insn.x_pad_0 or insn.y_pad_1:
                    seen.add("padding")
            elif isinstance(insn, Gemm):
                seen.add("gemm reset" if insn.reset else "gemm")
                if insn.iter_out > 1 and insn.iter_in > 1:
                    seen.add("two loops")
            elif isinstance(insn, Alu):
                seen.add(f"alu {AluOp(insn.op).name} {'imm' if insn.use_imm else 'tensor'}")
            elif isinstance(insn, Store):
                seen.add("store")
                if insn.x_stride < insn.x_size:
                    seen.add("overlapping store")
    expected = {f"alu {op.name} {kind}" for op in AluOp for kind in ("imm", "tensor")}
    expected |= {"load INP", "load WGT", "load UOP", "load ACC", "load ACC_8BIT", "padding",
                 "gemm", "gemm reset", "two loops", "store", "overlapping store"}
    assert expected <= seen, expected - seen


def test_same_seed_same_program():
    cfg = HwConfig.preset("pynq")
    a, b = random_program(cfg, 3), random_program(cfg, 3)
    assert (a.dram == b.dram).all() and a.insn_count == b.insn_count
