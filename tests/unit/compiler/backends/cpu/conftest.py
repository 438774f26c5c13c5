"""A seeded generator for each CPU kernel test (the shared helpers live in tests.support)."""

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
