"""Per-channel fixed-point requantization on configurations with ALU MUL (quant/techniques/fixed_point.py): the
epilogue ((acc + bias) >> p) * M[c] >> n[c] is bit-exact on the host reference, the functional simulator
and the cycle model, never wraps int32, and a configuration without MUL refuses it in one line."""

import numpy as np
import pytest

from vtakit.compiler.ops.epilogues import requantize_channels
from vtakit.compiler.quant.techniques.fixed_point import INT32_MAX, MULT_BITS, VECTOR_ERROR, best_fixed_point, epilogue_error, fixed_point
from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.te import conv2d_def
from vtakit.errors import CompileError
from vtakit.isa.opcodes import AluOp

from tests.support.fixed_point_layers import PYNQ_MUL, fixed_point_layer

RNG = np.random.default_rng(1616)


def test_multipliers_have_their_bits_and_the_worst_product_fits_int32():
    _, w, b, fp, f = fixed_point_layer(RNG, 64, 48, 4)
    live = fp.multipliers[fp.shifts > fp.shifts.min()]        # channels whose shift was not clamped
    assert all(int(m).bit_length() in (MULT_BITS, MULT_BITS + 1) for m in live)
    bound = 128 * np.abs(w.astype(np.int64)).reshape(48, -1).sum(axis=1) + np.abs(b) + fp.rounding
    assert np.all(((bound >> fp.pre_shift) + 1) * fp.multipliers <= INT32_MAX)
    assert np.allclose(fp.multipliers * np.exp2(-(fp.pre_shift + fp.shifts).astype(float)), f, rtol=2.0 ** -MULT_BITS)


def test_each_layer_gets_the_multiplier_width_that_adds_least_error():
    """A small accumulator bound affords wide multipliers without a pre-shift; a large one (a wide 1x1
    layer's worst case) trades multiplier bits for pre-shift bits, and the choice beats any fixed width (up to
    what dropping the shift vector may cost)."""
    f = np.exp2(RNG.uniform(-9, -6, 16))
    small = best_fixed_point(f, np.full(16, 2 ** 14))
    large = best_fixed_point(f, np.full(16, 2 ** 26))
    assert small.pre_shift == 0 and large.pre_shift > 0
    assert int(small.multipliers.max()).bit_length() > int(large.multipliers.max()).bit_length()
    for bits in (8, 12, 16):
        assert epilogue_error(large, f) <= epilogue_error(fixed_point(f, np.full(16, 2 ** 26), bits), f) + VECTOR_ERROR


def test_one_shift_for_all_channels_where_their_factors_are_alike():
    """Factors within 2**3 of each other: one immediate shift, no shift vector (2 ALU cycles per entry
    saved); spread over 2**12: the vector stays."""
    alike = best_fixed_point(np.exp2(RNG.uniform(-10, -7, 32)), np.full(32, 2 ** 18))
    assert len(set(alike.shifts.tolist())) == 1
    apart = best_fixed_point(np.exp2(RNG.uniform(-20, -8, 32)), np.full(32, 2 ** 18))
    assert len(set(apart.shifts.tolist())) > 1


def test_the_host_epilogue_rounds_to_nearest():
    f = np.exp2(RNG.uniform(-14, -6, 32))
    fp = fixed_point(f, np.full(32, 2 ** 24))
    acc = RNG.integers(-2 ** 17, 2 ** 17, (1, 32, 40, 1)).astype(np.int32)
    y = requantize_channels((acc + fp.rounding.reshape(1, -1, 1, 1)).astype(np.int32),
                            tuple(int(s) for s in fp.shifts), (-128, 127),
                            tuple(int(m) for m in fp.multipliers), fp.pre_shift)
    ideal = np.clip(np.floor(acc * f.reshape(1, -1, 1, 1) + 0.5), -128, 127)
    assert np.abs(y - ideal).max() <= 1 and np.mean(y != ideal) < 0.02


def test_the_epilogue_shifts_multiplies_then_shifts():
    compute = conv2d_def(PYNQ_MUL, n=1, c_in=16, h=4, w=4, c_out=32, kh=3, kw=3, pad=1, bias=True, shift=17,
                         clip=(-128, 127), channel_shift=True, multiplier=True, pre_shift=3)
    steps = [(s.op, s.imm, s.operand.tensor.name if s.operand else None) for s in compute.steps]
    assert steps == [(AluOp.ADD, None, "bias"), (AluOp.SHR, 3, None), (AluOp.MUL, None, "mult"),
                     (AluOp.SHR, 15, None), (AluOp.SHR, 2, None), (AluOp.SHR, None, "shift"),
                     (AluOp.MIN, 127, None), (AluOp.MAX, -128, None)]


@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("device", ["fsim", "sim"])
def test_conv_with_multipliers_matches_the_reference_and_the_host(device, extreme):
    x, w, b, fp, _ = fixed_point_layer(RNG, 32, 48, 6, extreme)
    b = (b + fp.rounding).astype(np.int32)
    y, rep = ops.conv2d(x, w, padding=1, bias=b, shift=fp.shifts, clip=(-100, 120), config=PYNQ_MUL, device=device,
                        multiplier=fp.multipliers.astype(np.int32), pre_shift=fp.pre_shift)
    want = reference.conv2d(x, w, 1, 1, b, shift=fp.shifts, clip=(-100, 120), multiplier=fp.multipliers,
                            pre_shift=fp.pre_shift)
    assert np.array_equal(y, want)
    acc = reference.conv2d(x, w, 1, 1, b)                       # int32 accumulator, then the host's epilogue
    host = requantize_channels(acc, tuple(int(s) for s in fp.shifts), (-100, 120),
                               tuple(int(m) for m in fp.multipliers), fp.pre_shift)
    assert np.array_equal(y, host)
    assert len(np.unique(y)) > (2 if extreme else 8)
    wide = (acc.astype(np.int64) >> fp.pre_shift) * fp.multipliers.reshape(1, -1, 1, 1)   # no int32 wrap
    assert np.array_equal(y, np.clip(wide >> fp.shifts.reshape(1, -1, 1, 1), -100, 120))
    if extreme:
        assert np.abs(wide).max() > 2 ** 29      # the products come close to the int32 limit


def test_multipliers_on_a_config_without_mul_are_one_clear_error():
    x, w, b, fp, _ = fixed_point_layer(RNG, 16, 16, 4)
    with pytest.raises(CompileError, match="config pynq has none") as e:
        ops.conv2d(x, w, padding=1, bias=b, shift=fp.shifts, config="pynq", device="fsim",
                   multiplier=fp.multipliers.astype(np.int32), pre_shift=fp.pre_shift)
    assert "\n" not in str(e.value)
