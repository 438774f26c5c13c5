"""The kernel cache (a second call compiles nothing) and one-line CompileErrors for bad arguments."""

import numpy as np
import pytest

from vtakit.compiler.backends import cpu
from vtakit.errors import CompileError


def test_second_call_compiles_nothing(rng):
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    first = cpu.conv2d(x, w, pads=(1, 1, 1, 1))
    info = cpu.cache_info()
    second = cpu.conv2d(x * 2, w, pads=(1, 1, 1, 1))
    assert cpu.cache_info() == info
    np.testing.assert_allclose(second, 2 * first, rtol=1e-5, atol=1e-5)
    cpu.conv2d(x, w, pads=(1, 1, 1, 0))  # other parameters: a new kernel
    assert cpu.cache_info().kernels == info.kernels + 1
    assert cpu.cache_info().compile_seconds > info.compile_seconds


def test_clear_cache(rng):
    cpu.relu(rng.standard_normal(10).astype(np.float32))
    assert cpu.cache_info().kernels >= 1
    cpu.clear_cache()
    assert cpu.cache_info() == cpu.CacheInfo(0, 0.0)
    y = cpu.relu(np.array([-1.0, 2.0], np.float32))
    np.testing.assert_array_equal(y, [0.0, 2.0])
    assert cpu.cache_info().kernels == 1


def test_results_are_fresh_arrays():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert not np.shares_memory(cpu.transpose(x, (0, 1)), x)
    assert not np.shares_memory(cpu.relu(x), x)


X = np.zeros((1, 4, 5, 5), np.float32)
W = np.zeros((2, 4, 3, 3), np.float32)
Q = np.zeros((1, 4, 5, 5), np.int8)


@pytest.mark.parametrize("call,op,words", [
    (lambda: cpu.conv2d(X.astype(np.float64), W), "conv2d", "dtype float64"),
    (lambda: cpu.conv2d(X, W.astype(np.int8)), "conv2d", "dtype int8"),
    (lambda: cpu.conv2d(X, np.zeros((2, 3, 3, 3), np.float32)), "conv2d", "channels"),
    (lambda: cpu.conv2d(X, np.zeros((3, 2, 3, 3), np.float32), groups=2), "conv2d", "groups=2"),
    (lambda: cpu.conv2d(X, W, np.zeros(3, np.float32)), "conv2d", "bias"),
    (lambda: cpu.conv2d(Q, W.astype(np.int8), np.zeros(2, np.float32)), "conv2d", "int32"),
    (lambda: cpu.conv2d(X, W, shift=2), "conv2d", "int8"),
    (lambda: cpu.conv2d(Q, W.astype(np.int8), shift=40), "conv2d", "shift"),
    (lambda: cpu.conv2d(Q, W.astype(np.int8), clip=(0, 300)), "conv2d", "clip"),
    (lambda: cpu.conv2d(X, W, stride=(0, 1)), "conv2d", "stride"),
    (lambda: cpu.conv2d(X, np.zeros((2, 4, 7, 7), np.float32)), "conv2d", "does not fit"),
    (lambda: cpu.conv2d(X[0], W), "conv2d", "4-D"),
    (lambda: cpu.dense(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)), "dense", "features"),
    (lambda: cpu.matmul(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)), "matmul", "inner"),
    (lambda: cpu.matmul(np.zeros((2, 2, 3), np.float32), np.zeros((3, 3, 5), np.float32)), "matmul", "broadcast"),
    (lambda: cpu.max_pool2d(X.astype(np.int32), kernel=2, stride=2, pads=0), "max_pool2d", "dtype int32"),
    (lambda: cpu.avg_pool2d(X, kernel=(9, 9), stride=1, pads=0), "avg_pool2d", "does not fit"),
    (lambda: cpu.softmax(X, axis=4), "softmax", "axis"),
    (lambda: cpu.add(X, np.zeros(3, np.float32)), "add", "broadcast"),
    (lambda: cpu.add(X, Q), "add", "dtype int8"),
    (lambda: cpu.relu(X.astype(np.float16)), "relu", "dtype float16"),
    (lambda: cpu.add_int8(Q, Q, shift=-1), "add_int8", "shift"),
    (lambda: cpu.quantize(Q, 3), "quantize", "dtype int8"),
    (lambda: cpu.transpose(X, (0, 1, 1, 2)), "transpose", "permutation"),
    (lambda: cpu.transpose(X, (0, 1)), "transpose", "permutation"),
    (lambda: cpu.pad(X, [1, 1]), "pad", "pads"),
    (lambda: cpu.pad(X, [0] * 7 + [-1]), "pad", ">= 0"),
    (lambda: cpu.pad(Q, [0] * 8, value=1.5), "pad", "value"),
    (lambda: cpu.concat([X, X[:, :, :2, :3]], 1), "concat", "differs"),
    (lambda: cpu.concat([X, Q], 0), "concat", "int8"),
    (lambda: cpu.concat([], 0), "concat", "non-empty"),
    (lambda: cpu.matmul(np.array(2, np.float32), np.zeros(3, np.float32)), "matmul", "dimension"),
    (lambda: cpu.unpack_activation(np.zeros((1, 1, 2, 2, 1, 16), np.int8), 1, 17), "unpack_activation", "c"),
    (lambda: cpu.batch_norm(X, *(np.zeros(3, np.float32),) * 4, 1e-5), "batch_norm", "channels"),
])
def test_bad_arguments_raise_compile_error(call, op, words):
    with pytest.raises(CompileError) as info:
        call()
    assert info.value.op == op
    message = str(info.value)
    assert words in message and "\n" not in message
