"""Fixtures for the GPU backend's tests: an emulator and a seeded generator; makes this folder's helpers
(`gpu_marks`: skips that say why, `fake_driver`) importable, and the CPU tests' (`cpu_reference`, the
kernel properties and their sweep), which the emulated properties share."""

import sys
from pathlib import Path

import numpy as np
import pytest

from vtakit.compiler import cuda

_HERE = Path(__file__).resolve().parent
for _folder in (str(_HERE), str(_HERE.parent / "cpu")):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)


@pytest.fixture(scope="session")
def emulator() -> cuda.Emulator:
    return cuda.Emulator()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(4321)
