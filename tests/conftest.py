"""Shared test setup: make the helper modules in tests/ (e.g. `reference`) importable.

pytest runs with --import-mode=importlib, which does not put test folders on
sys.path, so `import reference` needs this (also under pytest-xdist workers).
"""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
