"""The board's runtime on a PYNQ-Z1's CPU, emulated: modules compiled here (x86-64, the full install) run
under qemu-arm (user mode) with Debian's armhf Python 3.11 and numpy 1.24 and vtakit's source alone on the
path (no llvmlite, onnx, scipy, matplotlib: the host kernels run on their numpy fallback), on the host
kernels (`device="cpu"`) and on the functional simulator, with outputs bit-identical to this machine's.

Set up once with `tests/support/armhf_sysroot.sh` (qemu-user and the armhf packages unpacked into
$VTAKIT_ARMHF_SYSROOT, default ~/.cache/vtakit/armhf); every test skips, saying which is missing, without it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import vtakit
from vtakit.compiler import zoo

ROOT = Path(__file__).resolve().parents[2]
SYSROOT = Path(os.environ.get("VTAKIT_ARMHF_SYSROOT", Path.home() / ".cache" / "vtakit" / "armhf")) / "root"
PYTHON = SYSROOT / "usr" / "bin" / "python3.11"
QEMU = shutil.which("qemu-arm")
SETUP = "run tests/support/armhf_sysroot.sh (as root) to set it up"

pytestmark = pytest.mark.slow   # each emulated Python start costs about 10 s

needs_emulator = pytest.mark.skipif(
    QEMU is None or not PYTHON.is_file(),
    reason=f"no qemu-arm on PATH; {SETUP}" if QEMU is None else f"no armhf Python at {PYTHON}; {SETUP}")

RUN = """
import json, platform, sys, time
import numpy as np
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.backends import cpu
module = CompiledModule.load(sys.argv[1], trust=True)
x = np.load(sys.argv[2])
out, seconds = {}, {}
for device in sys.argv[4:]:
    t0 = time.perf_counter()
    out.update({f"{device}/{k}": v for k, v in module.run(x, device=device).items()})
    seconds[device] = round(time.perf_counter() - t0, 1)
np.savez(sys.argv[3], **out)
print(json.dumps(dict(machine=platform.machine(), numpy=np.__version__, kernels=cpu.implementation(),
                      seconds=seconds, absent=[m for m in ("llvmlite", "onnx", "scipy", "matplotlib")
                                               if m in sys.modules])))
"""


def _emulated(*argv: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    """The armhf Python under qemu-arm: its own stdlib and dist-packages, vtakit's source on PYTHONPATH."""
    env = {"PATH": os.environ.get("PATH", ""), "QEMU_LD_PREFIX": str(SYSROOT), "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": os.environ.get("HOME", str(cwd))}
    return subprocess.run([str(QEMU), str(PYTHON), *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _compiled(name: str, folder: Path):
    """`name` compiled for pynq here, its input and its outputs on the host kernels and the functional model."""
    model = zoo.build(name)
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(11)
    x, *calibration = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    module = vtakit.compile(model, "pynq", calibrate=calibration)
    module.save(folder / f"{name}.vtamod")
    np.save(folder / "x.npy", x)
    return {f"{d}/{k}": v for d in ("cpu", "fsim") for k, v in module.run(x, device=d).items()}


def _check_bit_identical(name: str, folder: Path, timeout: int) -> dict:
    expected = _compiled(name, folder)
    run = _emulated("-c", RUN, f"{name}.vtamod", "x.npy", "arm.npz", "cpu", "fsim", cwd=folder, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    assert facts["machine"] == "armv7l" and facts["kernels"] == "numpy fallback" and facts["absent"] == []
    with np.load(folder / "arm.npz") as got:
        assert sorted(got.files) == sorted(expected)
        for key, value in expected.items():
            np.testing.assert_array_equal(got[key], value, err_msg=f"{name} {key}")
    return facts


@needs_emulator
def test_a_small_network_runs_bit_identically_on_emulated_armv7(tmp_path):
    facts = _check_bit_identical("digits_cnn", tmp_path, timeout=300)
    assert facts["numpy"].startswith("1.")


@needs_emulator
def test_the_cli_of_a_board_runs_under_emulation(tmp_path):
    for argv in (["--help"], ["fpga", "boards"], ["fpga", "check", "--help"]):
        run = _emulated("-m", "vtakit", *argv, cwd=tmp_path, timeout=300)
        assert run.returncode == 0 and not run.stderr, run.stderr[-3000:]
    compile_here = _emulated("-m", "vtakit", "compile", "m.onnx", "-o", "m.vtamod", cwd=tmp_path, timeout=300)
    assert compile_here.returncode == 1
    assert compile_here.stderr.startswith("error: vtakit compile needs vtakit's full install (")


@needs_emulator
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v1"])
def test_resnet18_and_mobilenet_run_bit_identically_on_emulated_armv7(tmp_path, name):
    _check_bit_identical(name, tmp_path, timeout=1200)
