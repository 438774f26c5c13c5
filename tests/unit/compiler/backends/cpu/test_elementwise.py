"""Elementwise kernels, softmax, batch norm and (de)quantisation against numpy."""

from tests.support import cpu_reference as ref
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vtakit.compiler.backends import cpu

BROADCASTS = [
    ((3, 5), (3, 5)),
    ((2, 3, 4, 5), (3, 1, 1)),       # per-channel
    ((4, 1, 7), (3, 1)),             # both sides broadcast
    ((1,), (2, 13)),
    ((), (6,)),
]


@pytest.mark.parametrize("a_shape,b_shape", BROADCASTS)
@pytest.mark.parametrize("name", ["add", "sub", "mul"])
def test_binary_float32(rng, name, a_shape, b_shape):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    y = getattr(cpu, name)(a, b)
    expected = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[name](a, b)
    assert y.shape == expected.shape and y.dtype == np.float32
    np.testing.assert_array_equal(y, expected)  # one rounding per element: exact


def test_binary_noncontiguous(rng):
    a = rng.standard_normal((6, 8)).astype(np.float32)
    np.testing.assert_array_equal(cpu.add(a.T, a[:, ::-1].T), a.T + a[:, ::-1].T)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int32])
def test_relu(rng, dtype):
    x = (rng.standard_normal((3, 17)) * 100).astype(dtype)
    np.testing.assert_array_equal(cpu.relu(x), np.maximum(x, 0))
    assert np.isnan(cpu.relu(np.array([np.nan], np.float32)))[0]


def test_clip(rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_array_equal(cpu.clip(x, -0.5, 0.25), np.clip(x, np.float32(-0.5), np.float32(0.25)))
    q = rng.integers(-128, 128, (33,)).astype(np.int8)
    np.testing.assert_array_equal(cpu.clip(q, -3, 100), np.clip(q, -3, 100))


@pytest.mark.parametrize("shift,clip", [(0, (-128, 127)), (1, (-128, 127)), (3, (0, 50))])
@pytest.mark.parametrize("b_shape", [(4, 9), (9,)])
def test_add_int8(rng, shift, clip, b_shape):
    a = rng.integers(-128, 128, (4, 9)).astype(np.int8)
    b = rng.integers(-128, 128, b_shape).astype(np.int8)
    np.testing.assert_array_equal(cpu.add_int8(a, b, shift=shift, clip=clip), ref.add_int8(a, b, shift, clip))


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.floats(-300, 300, width=32), min_size=1, max_size=40), exp=st.integers(-3, 6))
def test_quantize_matches_numpy(values, exp):
    x = np.array(values, dtype=np.float32)
    np.testing.assert_array_equal(cpu.quantize(x, exp), ref.quantize(x, exp))


def test_quantize_ties_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 200.0, -200.0], np.float32)
    np.testing.assert_array_equal(cpu.quantize(x, 0), [0, 2, 2, 0, -2, 127, -128])


@pytest.mark.parametrize("dtype", [np.int8, np.int32])
def test_dequantize(rng, dtype):
    q = rng.integers(-128, 128, (3, 11)).astype(dtype)
    np.testing.assert_array_equal(cpu.dequantize(q, 4), ref.dequantize(q, 4))
    np.testing.assert_array_equal(cpu.dequantize(q, -2), ref.dequantize(q, -2))


@pytest.mark.parametrize("shape,axis", [((2, 1000), -1), ((3, 7), 0), ((2, 5, 7, 3), 1), ((1, 13), 1), ((4,), 0)])
def test_softmax(rng, shape, axis):
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    y = cpu.softmax(x, axis=axis)
    np.testing.assert_allclose(y, ref.softmax(x, axis), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.sum(axis=axis), 1.0, rtol=1e-5)


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1000.0, -1000.0, 999.0]], np.float32)
    np.testing.assert_allclose(cpu.softmax(x), ref.softmax(x), rtol=1e-5, atol=1e-30)


def test_batch_norm(rng):
    x = rng.standard_normal((2, 5, 3, 7)).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    var = rng.random(5).astype(np.float32) + 0.1
    np.testing.assert_allclose(cpu.batch_norm(x, scale, bias, mean, var, 1e-5),
                               ref.batch_norm(x, scale, bias, mean, var, 1e-5), rtol=1e-5, atol=1e-5)
