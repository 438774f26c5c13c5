"""The compile cache (compiler/cache.py): an unchanged compile loads the stored module, bit for bit; each
part of the key changed is a miss; a damaged entry is a miss with a warning, never a failed compile; and
the tests' own compiles never touch it (tests/conftest.py turns it off and points it at a temporary folder)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import vtakit
from vtakit.compiler import cache, zoo
from vtakit.compiler.backends.vta.dispatch import use_schedules
from vtakit.compiler.frontend.limits import use_limits
from vtakit.compiler.module.container import read_module
from vtakit.compiler.options import CompileOptions
from vtakit.errors import VtaError
from vtakit.isa.config import HwConfig

PYNQ = HwConfig.preset("pynq")


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A cache of the test's own, turned on."""
    monkeypatch.setenv("VTAKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VTAKIT_COMPILE_CACHE", "on")
    return tmp_path / "cache"


def _samples(seed: int = 0, n: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(n)]


def _stored(module, path: Path):
    module.save(path)
    return read_module(path)


def _counting(monkeypatch) -> list[int]:
    """How often the pipeline really compiles (its first step runs), from here on."""
    from vtakit.compiler import pipeline
    runs: list[int] = []
    first = pipeline.PIPELINE[0]
    steps = (type(first)(first.name, lambda c: (runs.append(1), first.run(c))[1], first.targets, first.doc),
             *pipeline.PIPELINE[1:])
    monkeypatch.setattr(pipeline, "PIPELINE", steps)
    return runs


def test_tests_run_with_the_cache_off_in_a_folder_of_their_own():
    assert not cache.enabled(None)
    home = Path.home() / ".cache" / "vtakit"
    assert cache.cache_dir() != home and "vtakit-test-key-" in str(cache.cache_dir())


def test_an_unchanged_compile_is_a_hit_with_the_same_module(folder, tmp_path, monkeypatch):
    runs = _counting(monkeypatch)
    model, cal = zoo.build("digits_cnn"), _samples()
    cold = vtakit.compile(model, "pynq", calibrate=cal)
    assert len(runs) == 1 and len(list(folder.glob("*.vtamod"))) == 1
    hit = vtakit.compile(model, "pynq", calibrate=_samples())
    assert len(runs) == 1, "an unchanged compile ran the compiler again"
    assert cold.notes.cached_from == "" and hit.notes.cached_from.startswith(str(folder))  # the CLI says so
    cold_manifest, cold_arrays = _stored(cold, tmp_path / "cold.vtamod")
    hit_manifest, hit_arrays = _stored(hit, tmp_path / "hit.vtamod")
    assert cold_manifest == hit_manifest
    assert cold_arrays.keys() == hit_arrays.keys()
    assert all(np.array_equal(cold_arrays[k], hit_arrays[k]) for k in cold_arrays)
    x = _samples(5, 1)[0]
    assert all(np.array_equal(a, b) for a, b in zip(cold.run(x, device="fsim").values(),
                                                     hit.run(x, device="fsim").values()))
    vtakit.compile(model, "pynq", calibrate=cal, cache=False)
    assert len(runs) == 2, "cache=False must compile afresh"


def test_a_changed_calibration_recompiles_and_keeps_both(folder, monkeypatch):
    runs = _counting(monkeypatch)
    model = zoo.build("digits_cnn")
    vtakit.compile(model, "pynq", calibrate=_samples(0))
    vtakit.compile(model, "pynq", calibrate=_samples(1))
    vtakit.compile(model, "pynq", calibrate=_samples(0))
    assert len(runs) == 2 and len(list(folder.glob("*.vtamod"))) == 2


def _key(model=None, cfg=PYNQ, options=None, calibrate=None):
    return cache.key(zoo.build("digits_cnn") if model is None else model, cfg, options or CompileOptions(),
                     _samples() if calibrate is None else calibrate)


def test_each_part_of_the_key_changes_it(monkeypatch):
    base = _key()
    assert base == _key() and len(base) == 64
    other_weights = zoo.build("digits_cnn")
    w = other_weights.graph.initializer[0]
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) + np.float32(1e-3), w.name))
    renamed = zoo.build("digits_cnn")
    renamed.graph.node[0].name = "renamed"
    sample = _samples()
    sample[1] = sample[1].copy()
    sample[1][0, 0, 0, 0] += 1e-6
    changed = {
        "weights": _key(model=other_weights),
        "graph": _key(model=renamed),
        "calibration": _key(calibrate=sample),
        "no calibration": _key(calibrate=[]),
        "config": _key(cfg=PYNQ.replace(mem_latency=25)),
        "option": _key(options=CompileOptions.of(calibration="max")),
        "seed": _key(options=CompileOptions.of(seed=1)),
        "bind": _key(options=CompileOptions.of(bind={"x": np.zeros(3)})),
    }
    with use_limits(model_mb=123):
        changed["limits"] = _key()
    monkeypatch.setattr(cache.metadata, "version", lambda name: "999.0")
    changed["vtakit version"] = _key()
    monkeypatch.undo()
    cache.source_digest.cache_clear()
    real = cache.source_digest()
    monkeypatch.setattr(cache, "source_digest", lambda: real[::-1])
    changed["vtakit source"] = _key()
    monkeypatch.undo()
    assert _key() == base
    keys = list(changed.values())
    assert base not in keys and len(set(keys)) == len(keys), changed


def test_the_source_digest_covers_every_layer():
    text = cache.source_digest()
    assert len(text) == 64
    files = sum(len([f for f in names if f.endswith(".py")]) for _, _, names in
                os.walk(Path(vtakit.__file__).parent, followlinks=True))
    assert files > 150  # the layers are links inside the package: they are walked too


def test_external_data_is_part_of_the_model(tmp_path):
    model = zoo.build("digits_cnn")
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="m.onnx.data",
              size_threshold=0)
    before = cache.model_digest(path)
    assert before == cache.model_digest(str(path))
    data = bytearray((tmp_path / "m.onnx.data").read_bytes())
    data[0] ^= 1
    (tmp_path / "m.onnx.data").write_bytes(bytes(data))
    assert cache.model_digest(path) != before


def test_what_the_key_cannot_describe_is_not_cached(tmp_path):
    assert _key(calibrate=iter(_samples())) is None  # compile_module makes a list of it first
    assert cache.key(object(), PYNQ, CompileOptions(), None) is None
    assert cache.key(str(tmp_path / "missing.onnx"), PYNQ, CompileOptions(), None) is None
    with use_schedules(type("Table", (), {"lookup": lambda self, key, cfg: None})()):
        assert _key() is None
    with pytest.raises(VtaError, match="cache must be True, False or None"):
        cache.enabled("no")  # type: ignore[arg-type]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_entry_is_a_miss_with_a_warning(folder, monkeypatch, damage):
    runs = _counting(monkeypatch)
    model = zoo.build("digits_cnn")
    vtakit.compile(model, "pynq", calibrate=_samples())
    [entry] = folder.glob("*.vtamod")
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"" if damage == "empty"
                      else data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    with pytest.warns(cache.CompileCacheWarning, match="did not load, compiling again"):
        module = vtakit.compile(model, "pynq", calibrate=_samples())
    assert len(runs) == 2 and module.vta_tasks()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vtakit.compile(model, "pynq", calibrate=_samples())  # the entry was replaced: a clean hit
    assert len(runs) == 2


def test_an_unwritable_cache_warns_and_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("VTAKIT_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(cache.CompileCacheWarning, match="could not store"):
        module = vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=_samples(), cache=True)
    assert module.vta_tasks()


def test_the_oldest_entries_go_beyond_the_budget(folder, monkeypatch):
    folder.mkdir(parents=True)
    old = folder / f"{'0' * 64}.vtamod"
    old.write_bytes(b"x" * (1 << 20))
    os.utime(old, (1, 1))
    monkeypatch.setenv("VTAKIT_CACHE_MB", "0.5")
    vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=_samples())
    assert not old.exists() and len(list(folder.glob("*.vtamod"))) == 1
