"""conv2d and dense against the numpy references: float32 within tolerance, int8 bit-exact."""

from tests.support import cpu_reference as ref
import numpy as np
import pytest

from vtakit.compiler.backends import cpu


def assert_close(actual, expected):
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * scale)


# (N, C, H, W, O, KH, KW, stride, pads (t, l, b, r), dilation, groups)
CONV_CASES = [
    (1, 3, 13, 7, 5, 3, 3, (1, 1), (1, 0, 2, 1), (1, 1), 1),      # odd sizes, asymmetric pads
    (2, 17, 7, 13, 19, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1),    # C, O not multiples of the vector width
    (1, 8, 1, 1, 4, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),       # 1x1 on 1x1
    (1, 4, 13, 13, 6, 3, 2, (2, 1), (0, 1, 1, 0), (2, 3), 1),     # dilation, non-square kernel
    (1, 6, 9, 9, 9, 3, 3, (1, 2), (1, 1, 1, 1), (1, 1), 3),       # grouped
    (2, 8, 7, 7, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 8),       # depthwise
    (1, 5, 13, 7, 10, 3, 3, (2, 2), (0, 1, 2, 1), (2, 1), 5),     # depthwise, multiplier 2, stride 2, dilation
    (1, 3, 16, 16, 7, 5, 5, (1, 1), (2, 2, 2, 2), (1, 1), 1),     # 256 positions: several full panels + tail
]


def conv_kwargs(case):
    *_, stride, pads, dilation, groups = case
    return {"stride": stride, "pads": pads, "dilation": dilation, "groups": groups}


def conv_inputs(rng, case, dtype):
    n, c, h, w, o, kh, kw, *_, groups = case
    shapes = [(n, c, h, w), (o, c // groups, kh, kw)]
    if dtype == np.float32:
        x, wt = (rng.standard_normal(s).astype(np.float32) for s in shapes)
        return x, wt, rng.standard_normal(o).astype(np.float32)
    x, wt = (rng.integers(-128, 128, s).astype(np.int8) for s in shapes)
    return x, wt, rng.integers(-5000, 5000, o).astype(np.int32)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_float32(rng, case):
    x, w, bias = conv_inputs(rng, case, np.float32)
    before = x.copy(), w.copy(), bias.copy()
    y = cpu.conv2d(x, w, bias, **conv_kwargs(case))
    assert y.dtype == np.float32
    assert_close(y, ref.conv2d(x, w, bias, **conv_kwargs(case)))
    assert_close(cpu.conv2d(x, w, None, **conv_kwargs(case)), ref.conv2d(x, w, None, **conv_kwargs(case)))
    for original, now in zip(before, (x, w, bias)):
        np.testing.assert_array_equal(original, now)


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("shift,clip", [(None, None), (7, None), (None, (-10, 90)), (3, (0, 127))])
def test_conv2d_int8_bit_exact(rng, case, shift, clip):
    x, w, bias = conv_inputs(rng, case, np.int8)
    y = cpu.conv2d(x, w, bias, shift=shift, clip=clip, **conv_kwargs(case))
    expected = ref.conv2d(x, w, bias, shift=shift, clip=clip, **conv_kwargs(case))
    assert y.dtype == expected.dtype == (np.int32 if shift is None and clip is None else np.int8)
    np.testing.assert_array_equal(y, expected)


def test_conv2d_int8_without_bias(rng):
    case = CONV_CASES[1]
    x, w, _ = conv_inputs(rng, case, np.int8)
    np.testing.assert_array_equal(cpu.conv2d(x, w, shift=4, **conv_kwargs(case)),
                                  ref.conv2d(x, w, shift=4, **conv_kwargs(case)))


def test_conv2d_noncontiguous_input(rng):
    x = rng.standard_normal((1, 4, 9, 18)).astype(np.float32)[:, :, :, ::2]
    w = rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    assert_close(cpu.conv2d(x, w, pads=(1, 1, 1, 1)), ref.conv2d(x, w, pads=(1, 1, 1, 1)))


@pytest.mark.parametrize("n,k,o", [(1, 7, 3), (3, 64, 17), (5, 33, 9), (4, 16, 8)])
def test_dense_float32(rng, n, k, o):
    x = rng.standard_normal((n, k)).astype(np.float32)
    w = rng.standard_normal((o, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    assert_close(cpu.dense(x, w, b), ref.dense(x, w, b))
    assert_close(cpu.dense(x, w), ref.dense(x, w))


@pytest.mark.parametrize("n,k,o", [(1, 7, 3), (6, 50, 13)])
@pytest.mark.parametrize("shift,clip", [(None, None), (6, None), (2, (-64, 63))])
def test_dense_int8_bit_exact(rng, n, k, o, shift, clip):
    x = rng.integers(-128, 128, (n, k)).astype(np.int8)
    w = rng.integers(-128, 128, (o, k)).astype(np.int8)
    b = rng.integers(-3000, 3000, o).astype(np.int32)
    y = cpu.dense(x, w, b, shift=shift, clip=clip)
    np.testing.assert_array_equal(y, ref.dense(x, w, b, shift=shift, clip=clip))
    assert y.dtype == (np.int32 if shift is None and clip is None else np.int8)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((5, 7), (7, 3)),
    ((13, 40), (40, 70)),            # column tail, row tail
    ((2, 1, 6, 9), (3, 9, 33)),      # broadcast batch dims
    ((4, 5, 6), (6,)),               # 1-D operand
    ((6,), (2, 6, 4)),
])
def test_matmul(rng, a_shape, b_shape):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    y = cpu.matmul(a, b)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert y.shape == expected.shape
    assert_close(y, expected)
