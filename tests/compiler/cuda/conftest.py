"""Fixtures for the GPU backend's tests: an emulator and a seeded generator; makes this folder's helpers
(`gpu_marks`: skips that say why, `fake_driver`) importable."""

import sys
from pathlib import Path

import numpy as np
import pytest

from vtakit.compiler import cuda

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session")
def emulator() -> cuda.Emulator:
    return cuda.Emulator()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(4321)
