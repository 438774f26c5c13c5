"""Make this folder's helpers (`cpu_reference`) importable and give each test a seeded generator."""

import sys
from pathlib import Path

import numpy as np
import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
