"""Fixtures for the GPU backend's tests: an emulator and a seeded generator (the shared helpers, e.g.
`gpu_marks` and `fake_driver`, live in tests.support)."""

import numpy as np
import pytest

from vtakit.compiler.backends import cuda

@pytest.fixture(scope="session")
def emulator() -> cuda.Emulator:
    return cuda.Emulator()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(4321)
