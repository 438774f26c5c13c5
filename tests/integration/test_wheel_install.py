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
import tomllib
import venv
from pathlib import Path

import numpy as np
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


def _build_wheel(tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    had_build = (ROOT / "build").exists()     # setuptools builds in the source tree; leave it as it was
    try:
        built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                     tmp_path, 600)
    finally:
        if not had_build:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert built.returncode == 0, _tail(built)
    return next(wheels.glob("vtakit-*.whl"))


def _install(tmp_path: Path, env_dir: Path, *args: str) -> Path:
    """A fresh venv with `pip install args`; its python (skips when the package index cannot be reached)."""
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "-q", "--retries", "2", *args], tmp_path, 1800)
    if installed.returncode != 0 and UNREACHABLE.search(installed.stderr):
        said = [line for line in installed.stderr.splitlines() if line.startswith("ERROR:")]
        reason = (said or [UNREACHABLE.search(installed.stderr).group(0)])[-1]
        pytest.skip(f"the package index cannot be reached or lacks a dependency: {reason[:300]}")
    assert installed.returncode == 0, _tail(installed)
    return python


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_layer_demo(tmp_path):
    env_dir, outside = tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    python = _install(tmp_path, env_dir, str(_build_wheel(tmp_path)))
    where = _run([str(python), "-c", "import vtakit; print(vtakit.__file__)"], outside, 120)
    assert where.stdout.strip().startswith(str(env_dir)), _tail(where)
    from_wheel = _layer_demo_cycles(_run([str(env_dir / "bin" / "vtakit"), "demo", "--layer", "C2"], outside, 600))
    from_repo = _layer_demo_cycles(_run([sys.executable, "-m", "vtakit", "demo", "--layer", "C2"], ROOT, 600))
    assert from_wheel == from_repo


FLOOR = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(==|>=)\s*([0-9][^,;\s]*)\s*(;.*)?$")

SMOKE = """
import numpy as np, vtakit
from vtakit.compiler import zoo
model = zoo.build("digits_cnn")
shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
rng = np.random.default_rng(0)
module = vtakit.compile(model, "pynq", calibrate=[rng.standard_normal(shape).astype(np.float32) for _ in range(2)])
x = rng.standard_normal(shape).astype(np.float32)
ys = [next(iter(module.run(x, device=d).values())) for d in ("cpu", "fsim", "sim")]
assert all(np.array_equal(ys[0], y) for y in ys), "devices disagree"
print("floors smoke ok", np.__version__)
"""


def declared_floors() -> list[str]:
    """`name==version` for every base dependency pinned or bounded from below in pyproject.toml."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = []
    for dep in deps:
        found = FLOOR.match(dep.strip())
        if found and not found.group(5):  # an environment marker (tomli below 3.11) does not apply here
            pins.append(f"{found.group(1)}=={found.group(4)}")
    return pins


def test_the_declared_dependency_floors_compile_and_run(tmp_path):
    """Each base dependency at the lowest version pyproject.toml allows (a constraints file; what they
    pull in resolves as for anyone): the wheel installs, compiles a network and runs it alike on the cpu,
    the functional and the cycle model.  A floor that is wrong fails here, not on a user's machine."""
    floors = declared_floors()
    assert any(p.startswith("numpy==") for p in floors) and any(p.startswith("llvmlite==") for p in floors)
    constraints = tmp_path / "floors.txt"
    constraints.write_text("\n".join(floors) + "\n")
    python = _install(tmp_path, tmp_path / "venv", "-c", str(constraints), str(_build_wheel(tmp_path)))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    smoke = _run([str(python), "-c", SMOKE], outside, 900)
    assert smoke.returncode == 0 and "floors smoke ok" in smoke.stdout, _tail(smoke)


COMPILE_ZOO = """
import sys, numpy as np, vtakit
from vtakit.compiler import zoo
for name in sys.argv[2:]:
    model = zoo.build(name)
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    module = vtakit.compile(model, "pynq", calibrate=[rng.standard_normal(shape).astype(np.float32) for _ in range(2)])
    module.save(f"{sys.argv[1]}/{name}.vtamod")
    np.save(f"{sys.argv[1]}/{name}.x.npy", rng.standard_normal(shape).astype(np.float32))
"""


def test_the_board_extra_alone_runs_modules_compiled_with_the_full_install(tmp_path):
    """What a board holds (issue 41): a fresh venv with numpy 1.26 and rich only (the `board` extra) and the
    wheel installed --no-deps runs ResNet-18 and MobileNet-v1 modules compiled with the full install, on
    `cpu` (the numpy kernels: no llvmlite) and `fsim`, with outputs bit-identical to the full install's
    (`--trust`: the venv has its own signing key, as a board has)."""
    nets = ("resnet18", "mobilenet_v1")
    made = _run([sys.executable, "-c", COMPILE_ZOO, str(tmp_path), *nets], ROOT, 1800)
    assert made.returncode == 0, _tail(made)
    wheel = _build_wheel(tmp_path)
    python = _install(tmp_path, tmp_path / "board", "numpy==1.26.4", "rich>=13")
    nodeps = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], tmp_path, 600)
    assert nodeps.returncode == 0, _tail(nodeps)
    absent = _run([str(python), "-c", "import importlib.util as u; print([m for m in ('llvmlite', 'onnx', 'scipy', "
                   "'matplotlib', 'xgboost') if u.find_spec(m)])"], tmp_path, 120)
    assert absent.stdout.strip() == "[]", _tail(absent)
    for name in nets:
        module, x = tmp_path / f"{name}.vtamod", tmp_path / f"{name}.x.npy"
        for device in ("cpu", "fsim"):
            ours, theirs = tmp_path / f"{name}.{device}.full.npz", tmp_path / f"{name}.{device}.board.npz"
            full = _run([sys.executable, "-m", "vtakit", "run", str(module), "--input", str(x), "--device", device,
                         "--output", str(ours)], ROOT, 900)
            assert full.returncode == 0, _tail(full)
            board = _run([str(tmp_path / "board" / "bin" / "vtakit"), "run", str(module), "--input", str(x),
                          "--device", device, "--output", str(theirs), "--trust"], tmp_path, 900)
            assert board.returncode == 0, _tail(board)
            a, b = np.load(ours), np.load(theirs)
            assert sorted(a.files) == sorted(b.files) and all(np.array_equal(a[k], b[k]) for k in a.files), name
