"""Layout kernels are exact copies: transpose, pad, concat and the blocked activation layout."""

from tests.support import cpu_reference as ref
import numpy as np
import pytest

from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.vta.runtime import pack_activation, unpack_activation

DTYPES = [np.float32, np.int8, np.int32]


def values(rng, shape, dtype):
    return (rng.standard_normal(shape) * 100).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,perm", [
    ((2, 3, 5, 7), (0, 2, 3, 1)),        # NCHW -> NHWC
    ((1, 64, 7, 13), (0, 2, 3, 1)),      # larger than one tile
    ((37, 41), (1, 0)),
    ((2, 3, 4), (2, 1, 0)),
    ((2, 1, 3, 2, 2, 3), (5, 3, 1, 0, 4, 2)),
    ((5,), (0,)),
])
def test_transpose(rng, dtype, shape, perm):
    x = values(rng, shape, dtype)
    y = cpu.transpose(x, perm)
    np.testing.assert_array_equal(y, np.transpose(x, perm))
    assert y.flags.c_contiguous


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,pads", [
    ((2, 3, 5, 7), [0, 0, 1, 2, 0, 0, 3, 0]),
    ((4,), [2, 5]),
    ((3, 1), [0, 1, 1, 0]),
])
def test_pad(rng, dtype, shape, pads):
    x = values(rng, shape, dtype)
    rank = len(shape)
    widths = list(zip(pads[:rank], pads[rank:]))
    np.testing.assert_array_equal(cpu.pad(x, pads), np.pad(x, widths))
    np.testing.assert_array_equal(cpu.pad(x, pads, value=-3), np.pad(x, widths, constant_values=-3))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(rng, axis):
    shapes = {0: [(1, 3, 4), (2, 3, 4)], 1: [(2, 1, 4), (2, 5, 4), (2, 2, 4)], -1: [(2, 3, 1), (2, 3, 6)]}[axis]
    xs = [values(rng, s, np.float32) for s in shapes]
    np.testing.assert_array_equal(cpu.concat(xs, axis), np.concatenate(xs, axis))


@pytest.mark.parametrize("dtype", [np.int8, np.float32])
@pytest.mark.parametrize("n,c,h,w,batch,block", [(1, 16, 3, 3, 1, 16), (1, 5, 2, 7, 1, 16), (3, 17, 2, 1, 2, 8)])
def test_pack_unpack_activation(rng, dtype, n, c, h, w, batch, block):
    x = values(rng, (n, c, h, w), dtype)
    packed = cpu.pack_activation(x, batch, block)
    np.testing.assert_array_equal(packed, pack_activation(x, batch, block))
    np.testing.assert_array_equal(packed, ref.pack_activation(x, batch, block))
    np.testing.assert_array_equal(cpu.unpack_activation(packed, n, c), unpack_activation(packed, n, c))
    np.testing.assert_array_equal(cpu.unpack_activation(packed, n, c), x)
