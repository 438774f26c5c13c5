"""The numpy fallback against the native kernels, family by family: integer results and data movement
bit-identical, float results within 1e-5 of the output's scale (summation order, exp's rounding), the
same one-line errors, and the switch between the two (`cpu.select`, VTAKIT_HOST_KERNELS)."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.cpu import native, numpy_kernels
from vtakit.errors import CompileError, ConfigError

pytestmark = pytest.mark.skipif(native is None, reason="llvmlite is not installed: no native kernels to compare")


def same(expected: np.ndarray, got: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.flags.c_contiguous
    finite = np.isfinite(expected)
    if expected.dtype.kind == "f" and not np.array_equal(got, expected, equal_nan=True):
        np.testing.assert_array_equal(got[~finite], expected[~finite])
        scale = float(np.abs(expected[finite]).max(initial=0.0)) or 1.0
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-5, atol=1e-5 * scale)
    else:
        np.testing.assert_array_equal(got, expected)


def both(name: str, *args, **kwargs) -> None:
    same(getattr(native, name)(*args, **kwargs), getattr(numpy_kernels, name)(*args, **kwargs))


def int8(rng, *shape) -> np.ndarray:
    return rng.integers(-128, 128, shape, dtype=np.int8)


def f32(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


CONVS = [  # channels, outputs, kernel, stride, pads, dilation, groups
    (8, 16, 3, 1, (1, 1, 1, 1), 1, 1), (16, 16, 3, 2, (1, 1, 1, 1), 1, 16), (8, 16, 3, 1, (0, 1, 2, 1), 2, 2),
    (4, 8, 5, 2, (2, 2, 2, 2), 1, 4), (3, 8, 7, 2, (3, 3, 3, 3), 1, 1), (64, 64, 1, 1, (0, 0, 0, 0), 1, 1),
]


@pytest.mark.parametrize("integer", [True, False], ids=["int8", "float32"])
@pytest.mark.parametrize("c,o,k,s,pads,d,g", CONVS)
def test_conv2d(rng, integer, c, o, k, s, pads, d, g):
    make = int8 if integer else f32
    x, w = make(rng, 2, c, 11, 13), make(rng, o, c // g, k, k)
    bias = rng.integers(-5000, 5000, o).astype(np.int32) if integer else f32(rng, o)
    options = dict(stride=(s, s), pads=pads, dilation=(d, d), groups=g)
    both("conv2d", x, w, bias, **options)
    both("conv2d", x, w, None, **options)
    if integer:
        both("conv2d", x, w, bias, shift=7, clip=(0, 127), **options)
        both("conv2d", x, w, bias, shift=0, clip=None, **options)


def test_int8_accumulators_wrap_as_the_native_int32_does(rng):
    x = np.full((1, 64, 4, 4), -128, np.int8)
    w = np.full((2, 64, 3, 3), -128, np.int8)
    bias = np.array([2**31 - 1, -2**31], np.int32)  # every sum passes int32's ends
    both("conv2d", x, w, bias, pads=(1, 1, 1, 1))
    both("dense", x.reshape(1, -1)[:, :512], w.reshape(2, -1)[:, :512], bias)


@pytest.mark.parametrize("integer", [True, False], ids=["int8", "float32"])
def test_dense_and_matmul(rng, integer):
    make = int8 if integer else f32
    x, w = make(rng, 3, 70), make(rng, 10, 70)
    both("dense", x, w)
    if integer:
        both("dense", x, w, rng.integers(-99, 99, 10).astype(np.int32), shift=5, clip=(-10, 100))
    else:
        both("dense", x, w, f32(rng, 10))
        for a, b in [((2, 3, 4, 5), (5, 6)), ((5,), (2, 5, 3)), ((4, 5), (5,)), ((1, 3, 4), (2, 4, 2))]:
            both("matmul", f32(rng, *a), f32(rng, *b))


@pytest.mark.parametrize("integer", [True, False], ids=["int8", "float32"])
@pytest.mark.parametrize("window", [dict(kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1)),
                                    dict(kernel=(2, 3), stride=(1, 2), pads=(0, 1, 1, 0), ceil_mode=True),
                                    dict(kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0))])
def test_pooling(rng, integer, window):
    x = (int8 if integer else f32)(rng, 2, 5, 9, 9)
    both("max_pool2d", x, **window)
    both("max_pool2d", x, dilation=(2, 1), **window)
    both("avg_pool2d", x, **window)
    both("avg_pool2d", x, count_include_pad=True, **window)
    both("global_avg_pool", x)


def test_elementwise(rng):
    a, b = f32(rng, 4, 1, 6), f32(rng, 3, 1)
    for name in ("add", "sub", "mul"):
        both(name, a, b)
    x = f32(rng, 2, 3, 4, 4) * 40
    x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    both("quantize", x, 2)
    both("quantize", x, -3)
    both("relu", x)
    both("clip", x, -1.5, 2.25)
    q = int8(rng, 3, 4)
    for name in ("relu",):
        both(name, q)
    both("clip", q, -3, 50)
    both("dequantize", q, 3)
    both("dequantize", rng.integers(-2**31, 2**31, 50).astype(np.int32), -3)
    both("add_int8", q, int8(rng, 4), shift=1, clip=(0, 127))
    both("add_int8", q, int8(rng, 3, 1))
    both("relu", rng.integers(-9, 9, 20).astype(np.int32))
    v = [f32(rng, 3) for _ in range(4)]
    both("batch_norm", f32(rng, 2, 3, 4, 4), v[0], v[1], v[2], np.abs(v[3]), 1e-3)
    for axis in (-1, 1, 0):
        both("softmax", f32(rng, 3, 7, 5) * 5, axis)


def test_layout(rng):
    for x in (f32(rng, 2, 5, 3, 4), int8(rng, 2, 5, 3, 4), rng.integers(0, 9, (2, 5, 3, 4)).astype(np.int32)):
        both("transpose", x, (0, 2, 3, 1))
        both("pad", x, [0, 1, 2, 0, 1, 0, 0, 3], 1)
        both("concat", [x, x[:, :2]], 1)
        for batch, block in ((1, 4), (2, 16), (1, 5)):
            packed = native.pack_activation(x, batch, block)
            both("pack_activation", x, batch, block)
            both("unpack_activation", packed, 2, 5)


@pytest.mark.parametrize("call", [
    lambda k: k.conv2d(np.zeros((1, 3, 4, 4), np.int8), np.zeros((2, 3, 3, 3), np.float32)),
    lambda k: k.conv2d(np.zeros((1, 3, 4, 4), np.float32), np.zeros((2, 3, 3, 3), np.float32), shift=2),
    lambda k: k.dense(np.zeros((2, 5), np.int8), np.zeros((3, 4), np.int8)),
    lambda k: k.add(np.zeros(3, np.float32), np.zeros(4, np.float32)),
    lambda k: k.matmul(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)),
    lambda k: k.max_pool2d(np.zeros((1, 1, 2, 2), np.int8), kernel=(5, 5), stride=(1, 1), pads=(0, 0, 0, 0)),
    lambda k: k.softmax(np.zeros((2, 3), np.float32), 2),
    lambda k: k.quantize(np.zeros(3, np.float32), 200),
])
def test_bad_arguments_give_the_native_error_line(call):
    messages = []
    for kernels in (native, numpy_kernels):
        with pytest.raises(CompileError) as error:
            call(kernels)
        messages.append(str(error.value))
    assert messages[0] == messages[1]


def test_select_switches_every_caller_and_names_the_kernels(rng, monkeypatch):
    x = int8(rng, 1, 4, 6, 6)
    w = int8(rng, 4, 4, 3, 3)
    try:
        assert cpu.select("numpy") == "numpy fallback" == cpu.implementation()
        fallback = cpu.conv2d(x, w, pads=(1, 1, 1, 1), shift=4)
        assert cpu.select("native") == "native (llvmlite JIT)" == cpu.implementation()
        np.testing.assert_array_equal(cpu.conv2d(x, w, pads=(1, 1, 1, 1), shift=4), fallback)
        monkeypatch.setenv("VTAKIT_HOST_KERNELS", "numpy")
        assert cpu.select() == "numpy fallback"
        monkeypatch.setenv("VTAKIT_HOST_KERNELS", "fast")
        with pytest.raises(ConfigError, match="VTAKIT_HOST_KERNELS must be one of native, numpy, got 'fast'"):
            cpu.select()
    finally:
        monkeypatch.delenv("VTAKIT_HOST_KERNELS", raising=False)
        cpu.select()
    assert cpu.implementation() == "native (llvmlite JIT)"
