"""benchmarks/compile_time.py runs as a user starts it: a cold compile times the pipeline's phases, and the
same compile again comes from the cache, without running them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compile_time.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_cold_then_cached_phases():
    done = _script("--models", "digits_cnn", "--runs", "1", "--samples", "2", "--json")
    assert done.returncode == 0, done.stderr
    cold, cached = json.loads(done.stdout)
    assert (cold["run"], cached["run"]) == ("cold", "cached") and cold["tasks"] == cached["tasks"] > 0
    assert {"import", "quantize", "lower", "key", "store"} <= cold["phases_s"].keys()
    assert cached["phases_s"].keys() == {"key", "load"}, "a cached compile ran the pipeline"
    outer = [s for name, s in cold["phases_s"].items() if name != "heuristic"]  # it runs inside fuse and lower
    assert 0 < sum(outer) <= cold["total_s"]


def test_unknown_network_is_one_error_line():
    done = _script("--models", "nope")
    assert done.returncode == 2 and "unknown network 'nope'" in done.stderr
