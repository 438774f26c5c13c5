"""Per-output-channel requantization on the accelerator: an ALU SHR whose amount is a vector in the
accumulator buffer (`te.split_channel_shift`), bit-exact against numpy on fsim, the cycle model and the RTL."""

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.te import conv2d_def, split_channel_shift
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import AluOp

PYNQ = HwConfig.preset("pynq")
RNG = np.random.default_rng(16)


def operands(c_in: int, c_out: int, hw: int):
    x = RNG.integers(-128, 128, (1, c_in, hw, hw), dtype=np.int8)
    w = RNG.integers(-128, 128, (c_out, c_in, 3, 3), dtype=np.int8)
    b = RNG.integers(-20000, 20000, c_out, dtype=np.int32)
    return x, w, b


def test_split_keeps_the_vector_within_one_vta_shr():
    base, vec = split_channel_shift(PYNQ, [3, 18, 10], "c")
    assert base == 3 and vec.tolist() == [0, 15, 7] and vec.dtype == np.int32   # 18 - 15 = 3 in the immediate
    base, vec = split_channel_shift(PYNQ, [0, 15, 4], "c")
    assert base == 0 and vec.tolist() == [0, 15, 4]
    wide = PYNQ.replace(shr_wide=True)                                        # 6 signed bits: up to 31
    assert split_channel_shift(wide, [1, 31], "c") == (0, pytest.approx(np.array([1, 31])))


@pytest.mark.parametrize("shifts, match", [([0, 16], "spread over 0..16"), ([-1, 3], r"\[0, 32\)"),
                                           ([[1, 2]], "1-D integer"), ([1.5, 2.0], "1-D integer")])
def test_split_rejects_what_one_shr_cannot_express(shifts, match):
    with pytest.raises(CompileError, match=match):
        split_channel_shift(PYNQ, shifts, "conv7")


def test_the_epilogue_reads_the_vector_after_the_immediate_part():
    compute = conv2d_def(PYNQ, n=1, c_in=16, h=4, w=4, c_out=32, kh=3, kw=3, pad=1, bias=True, shift=3,
                         clip=(-128, 127), channel_shift=True)
    steps = [(s.op, s.imm, s.operand.tensor.name if s.operand else None) for s in compute.steps]
    assert steps == [(AluOp.ADD, None, "bias"), (AluOp.SHR, 3, None), (AluOp.SHR, None, "shift"),
                     (AluOp.MIN, 127, None), (AluOp.MAX, -128, None)]
    assert compute.tensors()["shift"].shape == (2,)


@pytest.mark.parametrize("device", ["fsim", "sim"])
@pytest.mark.parametrize("low, high", [(8, 20), (0, 15), (11, 11)])
def test_conv_with_per_channel_shifts_matches_numpy(device, low, high):
    x, w, b = operands(32, 48, 6)
    shifts = RNG.integers(low, high + 1, 48)
    shifts[0], shifts[-1] = low, high
    y, rep = ops.conv2d(x, w, padding=1, bias=b, shift=shifts, clip=(-100, 120), device=device)
    assert np.array_equal(y, reference.conv2d(x, w, 1, 1, b, shift=shifts, clip=(-100, 120)))
    assert len(np.unique(y)) > 8                        # not all clipped or all zero


def test_dense_with_per_channel_shifts_matches_numpy():
    x = RNG.integers(-128, 128, (1, 64), dtype=np.int8)
    w = RNG.integers(-128, 128, (40, 64), dtype=np.int8)
    shifts = RNG.integers(5, 12, 40)
    y, _ = ops.dense(x, w, shift=shifts, device="sim")
    assert np.array_equal(y, reference.dense(x, w, shift=shifts))


def test_a_shift_vector_of_the_wrong_length_is_one_clear_error():
    x, w, b = operands(16, 16, 4)
    with pytest.raises(CompileError, match="shift has 3 entries for 16 output channels"):
        ops.conv2d(x, w, padding=1, shift=[1, 2, 3], device="fsim")


def test_conv_with_per_channel_shifts_on_the_rtl():
    """The RTL reads the shift operand's low 5 bits as signed, like the simulators (build cached)."""
    x, w, b = operands(16, 32, 5)
    shifts = RNG.integers(4, 19, 32)
    y, rep = ops.conv2d(x, w, padding=1, bias=b, shift=shifts, clip=(-128, 127), device="rtl")
    assert np.array_equal(y, reference.conv2d(x, w, 1, 1, b, shift=shifts, clip=(-128, 127)))
    assert rep.stats.model == "rtl"
    _, sim = ops.conv2d(x, w, padding=1, bias=b, shift=shifts, clip=(-128, 127), device="sim")
    assert abs(sim.cycles - rep.cycles) <= 0.05 * rep.cycles
