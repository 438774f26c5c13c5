"""The AVX2- and SSE-shaped code paths (8 and 4 lanes, 16 registers) compute the same results.

The kernels are generated for the host's vector width; pretending the host is
narrower exercises the other tile shapes, masks and transpose blocks on any
machine (the wider host runs narrow vectors fine).
"""

import dataclasses

from tests.support import cpu_reference as ref
import numpy as np
import pytest

from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.cpu import codegen


@pytest.fixture(params=[256, 128])
def narrow_host(request, monkeypatch):
    state = codegen._llvm()
    narrow = dataclasses.replace(state.host, vector_bits=request.param, vector_registers=16)
    cpu.clear_cache()
    monkeypatch.setattr(state, "host", narrow)
    yield narrow
    monkeypatch.undo()
    cpu.clear_cache()


def test_narrow_vectors(rng, narrow_host):
    assert cpu.host_target().vector_bits == narrow_host.vector_bits
    x = rng.standard_normal((1, 5, 11, 9)).astype(np.float32)
    w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(cpu.conv2d(x, w, pads=(1, 1, 0, 2), stride=(1, 2)),
                               ref.conv2d(x, w, pads=(1, 1, 0, 2), stride=(1, 2)), rtol=1e-4, atol=1e-4)
    q = rng.integers(-128, 128, (1, 6, 9, 7)).astype(np.int8)
    qw = rng.integers(-128, 128, (6, 1, 3, 3)).astype(np.int8)
    np.testing.assert_array_equal(cpu.conv2d(q, qw, pads=(1, 1, 1, 1), groups=6, shift=5),
                                  ref.conv2d(q, qw, pads=(1, 1, 1, 1), groups=6, shift=5))
    d, dw = rng.standard_normal((3, 21)).astype(np.float32), rng.standard_normal((5, 21)).astype(np.float32)
    np.testing.assert_allclose(cpu.dense(d, dw), ref.dense(d, dw), rtol=1e-4, atol=1e-4)
    a, b = rng.standard_normal((7, 13)).astype(np.float32), rng.standard_normal((13, 19)).astype(np.float32)
    np.testing.assert_allclose(cpu.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    t = rng.integers(-128, 128, (2, 19, 5, 7)).astype(np.int8)
    for values in (t, t.astype(np.float32)):
        np.testing.assert_array_equal(cpu.transpose(values, (0, 2, 3, 1)), values.transpose(0, 2, 3, 1))
