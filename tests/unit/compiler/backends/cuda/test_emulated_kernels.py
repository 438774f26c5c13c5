"""Kernel logic without a GPU: every GPU kernel, emulated on the host from the same generated IR, against
the CPU backend (int8 bit for bit, float32 within summation-order tolerance).

Shapes are small but chosen to hit every edge of the tiled kernels: K, M and N
that are not multiples of the 16/64 tiles, several K steps, several blocks,
batches and groups.
"""

import numpy as np
import pytest

from vtakit.compiler.backends import cpu, cuda
from vtakit.compiler.backends.cuda import DeviceArray
from vtakit.compiler.ops.execute import _dequantize_linear, _quantize_linear
from vtakit.errors import CompileError, DeviceError


def int8(rng, *shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def floats(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def same(got, want):
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(want).max())))
    else:
        np.testing.assert_array_equal(got, want)


CONVS = [
    # (x shape, w shape, dtype, options)
    ((2, 8, 9, 7), (20, 8, 3, 3), "int8", dict(pads=(1, 1, 1, 1))),                       # int32 out
    ((1, 19, 7, 8), (40, 19, 3, 3), "int8", dict(pads=(1, 0, 2, 1), stride=(2, 1), shift=9, clip=(0, 127))),
    ((1, 6, 10, 10), (12, 3, 3, 3), "float32", dict(pads=(2, 1, 2, 1), groups=2, dilation=(2, 1))),
    ((1, 3, 23, 23), (16, 3, 7, 7), "float32", dict(pads=(3, 3, 3, 3), stride=2)),
    ((2, 40, 5, 5), (33, 40, 1, 1), "float32", {}),                                       # 1x1, K tail
    ((1, 6, 10, 10), (12, 1, 3, 3), "float32", dict(pads=(1, 1, 1, 1), groups=6, stride=2)),  # depthwise x2
    ((2, 16, 9, 9), (16, 1, 3, 3), "int8", dict(pads=(1, 1, 1, 1), groups=16, shift=5, clip=(-20, 90))),
]


@pytest.mark.parametrize("x_shape, w_shape, dtype, options", CONVS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d(emulator, rng, x_shape, w_shape, dtype, options, with_bias):
    make = int8 if dtype == "int8" else floats
    x, w = make(rng, *x_shape), make(rng, *w_shape)
    bias = None
    if with_bias:
        bias = rng.integers(-3000, 3000, w_shape[0]).astype(np.int32) if dtype == "int8" else floats(rng, w_shape[0])
    same(cuda.conv2d(x, w, bias, gpu=emulator, **options), cpu.conv2d(x, w, bias, **options))


@pytest.mark.parametrize("batch, inputs, outputs, dtype, options", [
    (1, 200, 70, "float32", {}),
    (3, 37, 21, "int8", {}),
    (20, 100, 65, "int8", dict(shift=8, clip=(-100, 100))),
    (17, 64, 10, "float32", {}),
])
def test_dense(emulator, rng, batch, inputs, outputs, dtype, options):
    make = int8 if dtype == "int8" else floats
    x, w = make(rng, batch, inputs), make(rng, outputs, inputs)
    bias = rng.integers(-999, 999, outputs).astype(np.int32) if dtype == "int8" else floats(rng, outputs)
    same(cuda.dense(x, w, bias, gpu=emulator, **options), cpu.dense(x, w, bias, **options))


@pytest.mark.parametrize("a_shape, b_shape", [((2, 1, 5, 7), (3, 7, 20)), ((7,), (7, 3)), ((4, 7), (7,)),
                                              ((33, 18), (18, 70))])
def test_matmul(emulator, rng, a_shape, b_shape):
    a, b = floats(rng, *a_shape), floats(rng, *b_shape)
    same(cuda.matmul(a, b, gpu=emulator), cpu.matmul(a, b))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("options", [
    dict(kernel=3, stride=2, pads=(1, 1, 1, 1)),
    dict(kernel=(2, 3), stride=(2, 1), pads=(0, 1, 1, 0), ceil_mode=True),
    dict(kernel=2, stride=2, pads=0),
])
def test_pooling(emulator, rng, dtype, options):
    x = (int8 if dtype == "int8" else floats)(rng, 2, 3, 9, 11)
    same(cuda.max_pool2d(x, gpu=emulator, **options), cpu.max_pool2d(x, **options))
    same(cuda.max_pool2d(x, dilation=2, gpu=emulator, **options), cpu.max_pool2d(x, dilation=2, **options))
    for include in (False, True):
        same(cuda.avg_pool2d(x, count_include_pad=include, gpu=emulator, **options),
             cpu.avg_pool2d(x, count_include_pad=include, **options))


@pytest.mark.parametrize("shape", [(1, 40, 7, 7), (2, 3, 20, 20), (1, 5, 1, 1)])
def test_global_avg_pool(emulator, rng, shape):
    for x in (floats(rng, *shape), int8(rng, *shape)):
        same(cuda.global_avg_pool(x, gpu=emulator), cpu.global_avg_pool(x))


@pytest.mark.parametrize("shape, axis", [((1, 1000), -1), ((3, 5, 7), 1), ((2, 300), 1), ((4,), 0)])
def test_softmax(emulator, rng, shape, axis):
    x = 4 * floats(rng, *shape)
    got = cuda.softmax(x, axis=axis, gpu=emulator)
    same(got, cpu.softmax(x, axis=axis))
    np.testing.assert_allclose(got.sum(axis=axis), 1.0, rtol=1e-5)


def test_elementwise(emulator, rng):
    a, b = floats(rng, 2, 3, 4, 5), floats(rng, 3, 1, 5)
    for name in ("add", "sub", "mul"):
        same(getattr(cuda, name)(a, b, gpu=emulator), getattr(cpu, name)(a, b))
    same(cuda.relu(a, gpu=emulator), cpu.relu(a))
    wide = rng.integers(-2**31, 2**31 - 1, (50,)).astype(np.int32)
    same(cuda.relu(wide, gpu=emulator), cpu.relu(wide))
    same(cuda.clip(a, -0.5, 0.25, gpu=emulator), cpu.clip(a, -0.5, 0.25))
    q, r = int8(rng, 2, 3, 4, 5), int8(rng, 1, 3, 1, 5)
    same(cuda.clip(q, -3, 60, gpu=emulator), cpu.clip(q, -3, 60))
    same(cuda.add_int8(q, r, shift=1, clip=(0, 100), gpu=emulator), cpu.add_int8(q, r, shift=1, clip=(0, 100)))
    same(cuda.quantize(10 * a, 3, gpu=emulator), cpu.quantize(10 * a, 3))
    same(cuda.dequantize(q, 5, gpu=emulator), cpu.dequantize(q, 5))
    same(cuda.dequantize(wide, -3, gpu=emulator), cpu.dequantize(wide, -3))
    vectors = [floats(rng, 3) for _ in range(3)] + [np.abs(floats(rng, 3))]
    x = floats(rng, 2, 3, 4, 4)
    same(cuda.batch_norm(x, *vectors, gpu=emulator), cpu.batch_norm(x, *vectors))


@pytest.mark.parametrize("dtype, zero_point", [(np.int8, -3), (np.uint8, 128)])
def test_quantize_linear_matches_the_numpy_reference(emulator, rng, dtype, zero_point):
    x = 3 * floats(rng, 4, 50)
    x[0, :4] = [0.025, -0.075, 0.125, 1e6]  # ties and a value far out of range
    attrs = dict(scale=0.05, zero_point=zero_point, dtype=np.dtype(dtype))
    q = cuda.quantize_linear(x, 0.05, zero_point, dtype, gpu=emulator)
    same(q, _quantize_linear(x, attrs))
    same(cuda.dequantize_linear(q, 0.05, zero_point, gpu=emulator), _dequantize_linear(q, attrs))


def test_layout(emulator, rng):
    x = floats(rng, 2, 3, 4, 5)
    same(cuda.transpose(x, (0, 2, 3, 1), gpu=emulator), cpu.transpose(x, (0, 2, 3, 1)))
    same(cuda.transpose(x, (3, 1, 0, 2), gpu=emulator), cpu.transpose(x, (3, 1, 0, 2)))
    pads = [0, 1, 2, 0, 1, 0, 0, 3]
    same(cuda.pad(x, pads, value=-2.5, gpu=emulator), cpu.pad(x, pads, -2.5))
    q = int8(rng, 1, 5, 3, 3)
    same(cuda.pad(q, [0, 0, 1, 1, 0, 0, 1, 1], value=-128, gpu=emulator), cpu.pad(q, [0, 0, 1, 1, 0, 0, 1, 1], -128))
    parts = [int8(rng, 2, c, 3, 4) for c in (1, 5, 2)]
    same(cuda.concat(parts, 1, gpu=emulator), cpu.concat(parts, 1))
    same(cuda.concat([x, x[:1]], 0, gpu=emulator), cpu.concat([x, x[:1]], 0))


@pytest.mark.parametrize("n, c, batch, block", [(1, 32, 1, 16), (3, 20, 2, 16), (1, 3, 1, 4)])
def test_packed_activation_layout(emulator, rng, n, c, batch, block):
    x = int8(rng, n, c, 5, 6)
    packed = cuda.pack_activation(x, batch, block, gpu=emulator)
    same(packed, cpu.pack_activation(x, batch, block))
    same(cuda.unpack_activation(packed, n, c, gpu=emulator), x)


def test_device_arrays_stay_on_the_device(emulator, rng):
    """DeviceArray in, DeviceArray out: a chain of operators with one upload and one download."""
    x = floats(rng, 1, 4, 6, 6)
    w = floats(rng, 8, 4, 3, 3)
    before = emulator.launches
    y = cuda.relu(cuda.conv2d(emulator.upload(x), w, pads=(1, 1, 1, 1)))
    assert isinstance(y, DeviceArray) and y.backend is emulator and emulator.launches == before + 2
    flat = y.reshape(1, -1)
    assert flat.shape == (1, 288) and flat.buffer is y.buffer
    same(flat.numpy(), cpu.relu(cpu.conv2d(x, w, pads=(1, 1, 1, 1))).reshape(1, -1))
    mixed = cuda.add(x, emulator.upload(x))  # any DeviceArray operand picks the backend and the result kind
    assert isinstance(mixed, DeviceArray) and mixed.backend is emulator
    same(mixed.numpy(), x + x)


def test_errors_are_the_cpu_backends(emulator, rng):
    x = floats(rng, 1, 3, 8, 8)
    with pytest.raises(CompileError, match=r"op conv2d: w has dtype int8, expected float32"):
        cuda.conv2d(x, int8(rng, 4, 3, 3, 3), gpu=emulator)
    with pytest.raises(CompileError, match="op conv2d: shift/clip apply to int8 convolutions only"):
        cuda.conv2d(x, floats(rng, 4, 3, 3, 3), shift=3, gpu=emulator)
    with pytest.raises(CompileError, match="op add: shapes .* do not broadcast"):
        cuda.add(x, floats(rng, 5), gpu=emulator)
    with pytest.raises(CompileError, match="op dense: x has 4 features but w expects 5"):
        cuda.dense(emulator.upload(floats(rng, 1, 4)), floats(rng, 2, 5))
    with pytest.raises(CompileError, match="cannot reshape"):
        emulator.upload(x).reshape(5, -1)
    other = cuda.Emulator()
    with pytest.raises(DeviceError, match="operands live on emulator and emulator"):
        cuda.add(emulator.upload(x), other.upload(x))
