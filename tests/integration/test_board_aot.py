"""Prebuilt host kernels on an emulated PYNQ-Z1 (issue 41): a module compiled here with `--host-targets armv7`
runs under qemu-arm with Debian's armhf Python 3.11 and numpy 1.24 (no llvmlite) on its native armv7 kernels,
loaded with ctypes: int8 outputs bit-identical to x86-64's, float ones within 1e-5; the kernels that ran are
reported.  Skips, saying which is missing, without qemu-arm, the armhf sysroot (tests/support/armhf_sysroot.sh)
or the ziglang wheel (the linker for ARM)."""

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
from vtakit.compiler.backends.cpu import objcache

ROOT = Path(__file__).resolve().parents[2]
SYSROOT = Path(os.environ.get("VTAKIT_ARMHF_SYSROOT", Path.home() / ".cache" / "vtakit" / "armhf")) / "root"
PYTHON = SYSROOT / "usr" / "bin" / "python3.11"
QEMU = shutil.which("qemu-arm")
SETUP = "run tests/support/armhf_sysroot.sh (as root) to set it up"

pytestmark = [
    pytest.mark.slow,  # an emulated Python start costs about 10 s, the first zig link for ARM about a minute
    pytest.mark.skipif(QEMU is None, reason=f"no qemu-arm on PATH; {SETUP}"),
    pytest.mark.skipif(not PYTHON.is_file(), reason=f"no armhf Python at {PYTHON}; {SETUP}"),
    pytest.mark.skipif(not objcache.has_zig(), reason="no ziglang wheel (pip install ziglang): no linker for ARM"),
]

RUN = """
import json, platform, sys
import numpy as np
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.backends import cpu
module = CompiledModule.load(sys.argv[1])  # signed with the PC's key, which this board holds
x = np.load(sys.argv[2])
out = {f"{d}/{k}": v for d in sys.argv[4:] for k, v in module.run(x, device=d).items()}
np.savez(sys.argv[3], **out)
print(json.dumps(dict(machine=platform.machine(), kernels=cpu.implementation(), loaded=cpu.cache_info().loaded,
                      llvmlite="llvmlite" in sys.modules)))
"""


@pytest.mark.parametrize("target", ["vta", "cpu"])
def test_armv7_kernels_from_the_module(tmp_path, target):
    model = zoo.build("digits_cnn")
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    calibration = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(2)]
    module = vtakit.compile(model, "pynq", target=target, calibrate=calibration)
    devices = ["cpu", "fsim"] if target == "vta" else ["cpu"]
    expected = {f"{d}/{k}": v for d in devices for k, v in module.run(x, device=d).items()}
    held = module.build_host_kernels("armv7")
    module.save(tmp_path / "m.vtamod")
    np.save(tmp_path / "x.npy", x)
    env = {"PATH": os.environ.get("PATH", ""), "QEMU_LD_PREFIX": str(SYSROOT), "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path),
           "VTAKIT_KEY_FILE": os.environ["VTAKIT_KEY_FILE"]}  # native code runs only from a module this key signed
    run = subprocess.run([str(QEMU), str(PYTHON), "-c", RUN, "m.vtamod", "x.npy", "arm.npz", *devices], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"digits_cnn ({target}) on emulated armv7: {facts}")
    assert "HostKernelWarning" not in run.stderr, run.stderr[-1000:]  # e.g. sources edited between build and run
    assert facts["machine"] == "armv7l" and not facts["llvmlite"]
    assert facts["kernels"] == "native (prebuilt for cortex-a9, from the module)"
    assert 0 < facts["loaded"] <= held["armv7"]
    with np.load(tmp_path / "arm.npz") as got:
        for name, value in expected.items():
            if target == "vta":  # the int8 network: bit for bit
                np.testing.assert_array_equal(got[name], value, err_msg=name)
            else:
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
