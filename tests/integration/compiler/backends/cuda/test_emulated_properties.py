"""The emulated GPU kernel properties of tests/unit/compiler/backends/cuda/test_emulated_properties.py,
each on SWEEP_EXAMPLES (200) cases instead of its fast budget: the `[sweep]` variants, same seeds, same
names."""

from __future__ import annotations

import pytest

from tests.support.sweep import sweeps
from tests.unit.compiler.backends.cuda import test_emulated_properties as unit

pytestmark = pytest.mark.slow

globals().update(sweeps(unit))
