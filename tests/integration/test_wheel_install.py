"""What a user gets from the built wheel: it installs into a fresh virtual environment (no system site
packages, dependencies from the package index as for anyone) and its `vtakit` command runs
`vtakit demo --layer C2` from a folder outside the repository with the cycle count of the repository's
own run.  Skips with the reason when the package index cannot be reached."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CYCLES = re.compile(r"^C2: ([\d,]+) cycles", re.MULTILINE)
# pip's words when no index answers, or none holds a package at all ("from versions: none"); a pin that no
# release meets lists the versions it saw, and fails the test.
UNREACHABLE = re.compile(r".*(?:\(from versions: none\)|NewConnectionError|Name or service not known|"
                         r"Temporary failure in name resolution|Network is unreachable|ProxyError|ReadTimeout).*")

pytestmark = pytest.mark.slow


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put the repository or its venv on the path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _run(cmd: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout)


def _tail(run: subprocess.CompletedProcess) -> str:
    return (run.stdout[-2000:] + run.stderr[-2000:]).strip()


def _layer_demo_cycles(run: subprocess.CompletedProcess) -> int:
    assert run.returncode == 0, _tail(run)
    assert "result matches numpy: yes" in run.stdout, _tail(run)
    found = CYCLES.search(run.stdout)
    assert found, _tail(run)
    return int(found.group(1).replace(",", ""))


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_layer_demo(tmp_path):
    wheels, env_dir, outside = tmp_path / "wheels", tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    had_build = (ROOT / "build").exists()     # setuptools builds in the source tree; leave it as it was
    try:
        built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                     tmp_path, 600)
    finally:
        if not had_build:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert built.returncode == 0, _tail(built)
    wheel = next(wheels.glob("vtakit-*.whl"))

    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "-q", "--retries", "2", str(wheel)], tmp_path, 1800)
    if installed.returncode != 0 and UNREACHABLE.search(installed.stderr):
        said = [line for line in installed.stderr.splitlines() if line.startswith("ERROR:")]
        reason = (said or [UNREACHABLE.search(installed.stderr).group(0)])[-1]
        pytest.skip(f"the package index cannot be reached or lacks a dependency: {reason[:300]}")
    assert installed.returncode == 0, _tail(installed)

    where = _run([str(python), "-c", "import vtakit; print(vtakit.__file__)"], outside, 120)
    assert where.stdout.strip().startswith(str(env_dir)), _tail(where)
    from_wheel = _layer_demo_cycles(_run([str(env_dir / "bin" / "vtakit"), "demo", "--layer", "C2"], outside, 600))
    from_repo = _layer_demo_cycles(_run([sys.executable, "-m", "vtakit", "demo", "--layer", "C2"], ROOT, 600))
    assert from_wheel == from_repo
