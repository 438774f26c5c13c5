"""The suite's layout: tests/unit holds the fast tests, per module; tests/integration the networks, RTL
co-simulation, real models and everything marked slow.  Every test file lives under one of the two, and
the slow mark is written only under tests/integration (never in a unit test nor in a tests/support helper
a unit test could pull it in through)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _slow_marks(path: Path) -> list[int]:
    """Lines of `path` that name the slow mark (`pytest.mark.slow`, `mark.slow`, in any position)."""
    tree = ast.parse(path.read_text(), str(path))
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "slow"
                  and (isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
                       or isinstance(n.value, ast.Name) and n.value.id == "mark"))


def test_every_test_file_is_under_unit_or_integration():
    files = [p.relative_to(TESTS) for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts]
    stray = sorted(str(p) for p in files if p.parts[0] not in ("unit", "integration"))
    assert files and not stray, f"test files outside tests/unit and tests/integration: {stray}"


def test_no_slow_mark_under_unit_or_support():
    offenders = [f"{p.relative_to(TESTS)}:{line}" for folder in ("unit", "support")
                 for p in sorted((TESTS / folder).rglob("*.py")) for line in _slow_marks(p)]
    assert not offenders, f"slow marks belong under tests/integration: {offenders}"


def test_integration_holds_the_slow_tests():
    marked = [p for p in (TESTS / "integration").rglob("test_*.py") if _slow_marks(p)]
    assert marked


def test_the_scan_finds_every_spelling_of_the_mark(tmp_path):
    source = tmp_path / "test_x.py"
    source.write_text("import pytest\nfrom pytest import mark\n\n"
                      "pytestmark = pytest.mark.slow\n"
                      "@mark.slow\ndef test_a(): ...\n"
                      "@pytest.mark.parametrize('n', [1, pytest.param(2, marks=pytest.mark.slow)])\n"
                      "def test_b(n): ...\n"
                      "slow = 'not a mark'\n")
    assert _slow_marks(source) == [4, 5, 7]
