"""Host kernels compiled ahead of time and carried in the module (issue 41): a module compiled here with
x86_64 kernels runs in a process that has no llvmlite (as a board's runtime) on those kernels, loaded with
ctypes, bit-identically; a module without this machine's target says why in one line and runs on numpy;
the libraries are covered by the module's hashes."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.backends.cpu import objcache, targets
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.errors import CompileError, ConfigError

HERE = targets.machine_target()[0]
pytestmark = [pytest.mark.skipif(not objcache.has_zig(), reason="no ziglang wheel to link libraries for targets"),
              pytest.mark.skipif(HERE is None or HERE.name != "x86_64", reason="checks x86_64 kernels on this machine")]

WITHOUT_LLVMLITE = """
import json, sys, warnings
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("llvmlite", "onnx", "scipy", "matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Absent())
import numpy as np
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.backends import cpu
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = CompiledModule.load(sys.argv[1])
x = np.load(sys.argv[2])
np.savez(sys.argv[3], **{f"{d}/{k}": v for d in ("cpu", "fsim") for k, v in module.run(x, device=d).items()})
print(json.dumps(dict(kernels=cpu.implementation(), loaded=cpu.cache_info().loaded,
                      warnings=[str(w.message) for w in caught], llvmlite="llvmlite" in sys.modules)))
"""


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("aot")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    module = vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=[rng.standard_normal(x.shape).astype(np.float32)])
    np.save(folder / "x.npy", x)
    expected = {f"{d}/{k}": v for d in ("cpu", "fsim") for k, v in module.run(x, device=d).items()}
    return folder, module, expected


def _board(folder: Path, name: str) -> dict:
    run = subprocess.run([sys.executable, "-c", WITHOUT_LLVMLITE, str(folder / name), str(folder / "x.npy"),
                          str(folder / "out.npz")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_prebuilt_kernels_run_without_llvmlite(digits):
    folder, module, expected = digits
    held = module.build_host_kernels("x86_64")
    assert held["x86_64"] > 0
    module.save(folder / "x86.vtamod")
    assert CompiledModule.load(folder / "x86.vtamod").host_libraries.keys() == {"x86_64"}
    facts = _board(folder, "x86.vtamod")
    assert facts["kernels"] == "native (prebuilt for x86-64-v3, from the module)", facts
    assert facts["loaded"] == held["x86_64"] and not facts["llvmlite"] and not facts["warnings"]
    with np.load(folder / "out.npz") as got:
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_a_module_without_this_machines_target_says_why(digits):
    folder, module, expected = digits
    module.host_libraries = {}
    module.build_host_kernels(["aarch64"])
    module.save(folder / "arm64.vtamod")
    facts = _board(folder, "arm64.vtamod")
    assert facts["kernels"] == "numpy fallback" and facts["loaded"] == 0
    assert facts["warnings"] == ["host kernels on numpy: " + str(folder / "arm64.vtamod") + " holds host kernels for "
                                 "aarch64, not x86_64 (compile it with --host-targets x86_64)"]
    with np.load(folder / "out.npz") as got:
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_libraries_are_hashed_and_targets_named(digits, tmp_path):
    folder, module, _ = digits
    with pytest.raises(ConfigError, match="unknown host target 'mips'"):
        module.build_host_kernels("x86_64,mips")
    module.host_libraries = {"x86_64": np.zeros(16, np.uint8)}
    path = module.save(tmp_path / "m.vtamod")
    damaged = tmp_path / "damaged.vtamod"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(damaged, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "hostlib|x86_64.npy":
                data = data[:-1] + b"\x01"
            target.writestr(info, data)
    with pytest.raises(CompileError, match="hostlib/x86_64.*does not match its sha256"):
        CompiledModule.load(damaged)


def test_trusting_a_module_never_loads_its_machine_code(digits, tmp_path):
    """--trust checks a foreign module's fields; its prebuilt kernels are native code, which only a module
    signed with this machine's key may bring (issue 37: a file from elsewhere runs no code)."""
    folder, module, expected = digits
    module.build_host_kernels(HERE.name)
    path = module.save(tmp_path / "m.vtamod")
    with pytest.warns(UserWarning, match="not loaded: --trust checks a module's fields, not its machine code"):
        trusted = CompiledModule.load(path, trust=True)
    x = np.load(folder / "x.npy")
    assert all(np.array_equal(trusted.run(x, device="cpu")[k], v) for k, v in
               ((k.split("/", 1)[1], v) for k, v in expected.items() if k.startswith("cpu/")))
