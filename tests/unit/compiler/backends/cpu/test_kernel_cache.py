"""The on-disk kernel cache: a kernel compiled once per CPU is loaded by later processes (no JIT), the
time a first use costs is counted apart from run time, and a damaged entry is rebuilt, not trusted."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.cpu import jit, objcache

pytestmark = pytest.mark.skipif(objcache.linker(None) is None, reason="no cc and no ziglang wheel to link with")


@pytest.fixture
def disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VTAKIT_KERNEL_CACHE", str(tmp_path))
    cpu.clear_cache()
    yield tmp_path
    cpu.clear_cache()


def test_a_kernel_is_compiled_once_then_loaded(disk_cache, rng):
    x = rng.integers(-128, 128, (3, 37)).astype(np.int8)
    expected = np.maximum(x, 0)
    np.testing.assert_array_equal(cpu.relu(x), expected)
    first = cpu.cache_info()
    assert first.kernels == 1 and first.loaded == 0 and first.seconds >= first.compile_seconds > 0
    libraries = list(disk_cache.glob("*/vtk_*.so"))
    assert len(libraries) == 1
    cpu.clear_cache()  # what a fresh process sees
    np.testing.assert_array_equal(cpu.relu(x), expected)
    again = cpu.cache_info()
    assert (again.kernels, again.loaded) == (0, 1) and again.seconds > 0
    np.testing.assert_array_equal(cpu.relu(x), expected)  # a warm call: no first-use time added
    assert cpu.cache_info().seconds == again.seconds


FRESH = """
import sys, numpy as np
from vtakit.compiler.backends import cpu
rng = np.random.default_rng(1)
x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
np.save(sys.argv[1], cpu.conv2d(x, w, pads=(1, 1, 1, 1)))
info = cpu.cache_info()
print(info.kernels, info.loaded)
"""


def test_a_fresh_process_loads_and_a_damaged_entry_is_rebuilt(disk_cache, tmp_path):
    """Another process (where nothing is loaded yet) finds the kernel on disk; one that finds a damaged file
    in its place builds it again."""
    env = dict(os.environ, VTAKIT_KERNEL_CACHE=str(disk_cache))

    def fresh(name: str) -> tuple[str, np.ndarray]:
        run = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / name)], env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stdout.split()[-2:], np.load(tmp_path / name)

    counts, built = fresh("built.npy")
    assert counts == ["1", "0"]
    counts, loaded = fresh("loaded.npy")
    assert counts == ["0", "1"]
    (library,) = disk_cache.glob("*/vtk_*.so")
    library.unlink()
    library.write_bytes(b"not a library")  # a new file: the loaded one is never written in place
    counts, rebuilt = fresh("rebuilt.npy")
    assert counts == ["1", "0"] and objcache.Library(library).kernels
    np.testing.assert_array_equal(built, loaded)
    np.testing.assert_array_equal(built, rebuilt)


def test_the_cache_is_per_key_and_off_when_asked(disk_cache, rng, monkeypatch):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    cpu.add(a, a)
    cpu.add(a[:, :5].copy(), a[:, :5].copy())
    assert len(list(disk_cache.glob("*/vtk_*.so"))) == 2
    monkeypatch.setenv("VTAKIT_KERNEL_CACHE", "off")
    cpu.clear_cache()
    np.testing.assert_array_equal(cpu.add(a[:3], a[:3]), a[:3] + a[:3])
    assert len(list(disk_cache.glob("*/vtk_*.so"))) == 2


def test_symbols_name_the_whole_key():
    key = jit.KernelKey("elementwise", (("relu", (4,), np.int64(3), 0.5),))
    same = jit.KernelKey("elementwise", (("relu", (4,), 3, 0.5),))
    other = jit.KernelKey("elementwise", (("relu", (4,), 3, 0.25),))
    assert jit.kernel_symbol(key) == jit.kernel_symbol(same) != jit.kernel_symbol(other)
    assert jit.kernel_symbol(jit.KernelKey("cuda-emulated", ())) is None
