"""Pooling against the numpy references (ONNX MaxPool / AveragePool / GlobalAveragePool)."""

from tests.support import cpu_reference as ref
import numpy as np
import pytest

from vtakit.compiler.backends import cpu

# (H, W, kernel, stride, pads (t, l, b, r), ceil_mode)
WINDOWS = [
    (7, 7, (3, 3), (2, 2), (1, 1, 1, 1), False),
    (13, 7, (3, 3), (2, 2), (1, 0, 0, 1), True),
    (7, 13, (2, 3), (1, 2), (0, 1, 1, 1), True),
    (12, 12, (3, 3), (2, 2), (1, 1, 0, 0), True),
    (1, 1, (1, 1), (1, 1), (0, 0, 0, 0), False),
    (13, 13, (2, 2), (2, 2), (0, 0, 0, 0), True),
    (6, 5, (3, 2), (1, 1), (0, 0, 0, 0), False),
]


def activations(rng, shape, dtype):
    if dtype == np.int8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
@pytest.mark.parametrize("h,w,kernel,stride,pads,ceil_mode", WINDOWS)
def test_max_pool2d(rng, dtype, h, w, kernel, stride, pads, ceil_mode):
    x = activations(rng, (2, 3, h, w), dtype)
    y = cpu.max_pool2d(x, kernel=kernel, stride=stride, pads=pads, ceil_mode=ceil_mode)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, ref.max_pool2d(x, kernel, stride, pads, ceil_mode=ceil_mode))


def test_max_pool2d_dilation_and_all_negative(rng):
    x = -np.abs(rng.standard_normal((1, 2, 9, 9)).astype(np.float32)) - 1  # padding must never win
    y = cpu.max_pool2d(x, kernel=(3, 3), stride=(1, 2), pads=(2, 2, 2, 2), dilation=(2, 2))
    np.testing.assert_array_equal(y, ref.max_pool2d(x, (3, 3), (1, 2), (2, 2, 2, 2), dilation=(2, 2)))
    assert (y < 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("h,w,kernel,stride,pads,ceil_mode", WINDOWS)
def test_avg_pool2d(rng, dtype, count_include_pad, h, w, kernel, stride, pads, ceil_mode):
    x = activations(rng, (2, 3, h, w), dtype)
    y = cpu.avg_pool2d(x, kernel=kernel, stride=stride, pads=pads, count_include_pad=count_include_pad,
                       ceil_mode=ceil_mode)
    expected = ref.avg_pool2d(x, kernel, stride, pads, count_include_pad=count_include_pad, ceil_mode=ceil_mode)
    assert y.dtype == dtype
    if dtype == np.int8:
        np.testing.assert_array_equal(y, expected)
    else:
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_avg_pool2d_int8_rounds_half_up():
    # window sums 1, -1, 3 and -3 over 2 elements: 0.5 -> 1, -0.5 -> 0, 1.5 -> 2, -1.5 -> -1
    x = np.array([[[[1, 0, -1, 0, 2, 1, -2, -1]]]], dtype=np.int8)
    y = cpu.avg_pool2d(x, kernel=(1, 2), stride=(1, 2), pads=(0, 0, 0, 0))
    np.testing.assert_array_equal(y.ravel(), [1, 0, 2, -1])


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 5, 7, 7), (1, 3, 13, 1)])
def test_global_avg_pool(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(cpu.global_avg_pool(x), ref.global_avg_pool(x), rtol=1e-5, atol=1e-6)
    q = rng.integers(-128, 128, shape).astype(np.int8)
    y = cpu.global_avg_pool(q)
    assert y.shape == (shape[0], shape[1], 1, 1) and y.dtype == np.int8
    np.testing.assert_array_equal(y, ref.global_avg_pool(q))
