"""The host kernel properties of tests/unit/compiler/backends/cpu/test_kernel_properties.py, each on
SWEEP_EXAMPLES (200) cases instead of its fast budget: the `[sweep]` variants, same seeds, same names."""

from __future__ import annotations

import pytest

from tests.support.sweep import sweeps
from tests.unit.compiler.backends.cpu import test_kernel_properties as unit

pytestmark = pytest.mark.slow

globals().update(sweeps(unit))
