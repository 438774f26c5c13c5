"""The speed benchmarks that left the library (benchmarks/sim_speed.py, benchmarks/isa_speed.py) still
run from the repository and still check what they time: a small run of each, as a user starts it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_isa_speed_round_trips():
    done = _script("isa_speed.py", "--count", "2000", "--json")
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert row["round_trip"] is True and row["instructions"] == 2000


def test_sim_speed_checks_every_run_against_numpy():
    done = _script("sim_speed.py", "--programs", "gemm-2M", "--models", "functional,cycle", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["model"] for r in rows] == ["functional", "cycle"] and all(r["correct"] for r in rows)
    assert rows[0]["gemm_uops"] >= 2_000_000 and rows[1]["cycles"] > rows[1]["gemm_uops"]


def test_bad_arguments_are_one_error_line():
    done = _script("sim_speed.py", "--programs", "nope")
    assert done.returncode == 2 and "error: unknown benchmark program 'nope'" in done.stderr
    done = _script("sim_speed.py", "--config", "missing.json")
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
