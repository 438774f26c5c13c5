"""Fuzzing `.vtamod` loading: mutated modules load and run to the right outputs, or fail with exactly
one error from `vtakit.errors`; never another exception, never a different output.

Two kinds of mutation of one small valid module: byte flips in the file (caught by the zip's CRCs and
the content hashes), and structural edits of the manifest or of the relocation and instruction arrays,
re-saved with consistent hashes and signed with another key as an attacker would: refused for the
signature, and, loaded with trust=True (`--trust`), caught by `module.check` on its own.  Edits of
values a module legitimately chooses (weights, node attributes, instruction immediates) make another
valid module with other outputs: no loader can tell them apart, so they are not generated here.

The default budget is short; VTAKIT_FUZZ_EXAMPLES raises it (e.g. 2000 for a long run).
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.module.container import read_module
from vtakit.errors import CompileError, VtaError

from tests.support.saved_modules import attacker_save, saved_digits_module

EXAMPLES = int(os.environ.get("VTAKIT_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="VTAKIT_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SKIP = ("attrs",)  # node attributes: values a module chooses (see the docstring)


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    """(file bytes, manifest, arrays, input, reference outputs, an attacker's key file) of a small
    compiled network."""
    folder = tmp_path_factory.mktemp("fuzz")
    path, x, logits = saved_digits_module(folder, seed=3)
    manifest, arrays = read_module(path)
    for k in ("format", "version", "arrays", "sha256", "signature"):
        manifest.pop(k)
    return path.read_bytes(), manifest, arrays, x, logits, folder / "attacker.key"


def load_and_run(path: Path, x: np.ndarray, want: np.ndarray, trust: bool = False) -> None:
    """Either one VtaError, or the reference outputs on the device and on the host."""
    try:
        module = CompiledModule.load(path, trust=trust)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = [module.run(x, device=d, timeout_s=30)["logits"] for d in ("fsim", "cpu")]
    except VtaError as e:
        assert "\n" not in str(e)
        return
    for y in got:
        assert np.array_equal(y, want), "a mutated module ran to different outputs"


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(1, 255)), min_size=1, max_size=4))
def test_byte_flips(valid, flips):
    data = bytearray(valid[0])
    for pos, xor in flips:
        data[pos % len(data)] ^= xor
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.vtamod"
        path.write_bytes(bytes(data))
        load_and_run(path, valid[3], valid[4])


LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 63), 1 << 64), st.integers(-3, 70),
                   st.floats(allow_nan=False), st.text(max_size=6), st.lists(st.integers(-2, 40), max_size=5),
                   st.dictionaries(st.text(max_size=4), st.integers(-2, 40), max_size=2))


def _mutate_json(data, obj):
    """Replace, delete or nudge one value somewhere in `obj` (never under SKIP keys)."""
    while True:
        keys = list(obj) if isinstance(obj, dict) else list(range(len(obj)))
        keys = [k for k in keys if k not in SKIP]
        if not keys:
            return
        k = data.draw(st.sampled_from(keys))
        child = obj[k]
        if isinstance(child, (dict, list)) and child and data.draw(st.integers(0, 4)):
            obj = child
            continue
        how = data.draw(st.sampled_from(["replace", "delete", "nudge"]))
        if how == "delete":
            del obj[k]
        elif how == "nudge" and isinstance(child, int) and not isinstance(child, bool):
            obj[k] = child + data.draw(st.sampled_from([-4096, -16, -1, 1, 16, 4096, 1 << 31]))
        else:
            obj[k] = data.draw(LEAVES)
        return


def _mutate_array(data, arrays):
    """Reshape, retype or rewrite a relocation or instruction array, or drop or add an array."""
    names = sorted(k for k in arrays if k.startswith(("relocs/", "words/")))
    k = data.draw(st.sampled_from(names))
    a = arrays[k]
    how = data.draw(st.sampled_from(["values", "shape", "dtype", "drop", "add"]))
    if how == "values" and k.startswith("relocs/"):
        arrays[k] = np.asarray(data.draw(st.lists(st.integers(-70, 70), max_size=6)), np.int64)
    elif how == "shape":
        arrays[k] = a.reshape(-1) if a.ndim > 1 else a.reshape(1, -1)[:, :0] if data.draw(st.booleans()) \
            else np.asarray(a.reshape(-1)[0] if a.size else 0)
    elif how == "dtype":
        arrays[k] = a.astype(data.draw(st.sampled_from([np.int32, np.float64, np.uint8, np.int8])))
    elif how == "drop":
        del arrays[k]
    elif how == "add":
        arrays[k + "x"] = a
    else:  # words: truncate or repeat rows
        arrays[k] = a[:-1] if data.draw(st.booleans()) else np.concatenate([a, a[:1]])


@FUZZ
@given(data=st.data())
def test_field_mutations_with_consistent_hashes(valid, data):
    manifest, arrays = copy.deepcopy(valid[1]), dict(valid[2])
    for _ in range(data.draw(st.integers(1, 2))):
        if data.draw(st.integers(0, 3)):
            _mutate_json(data, manifest)
        else:
            _mutate_array(data, arrays)
    with tempfile.TemporaryDirectory() as d:
        path = attacker_save(Path(d) / "m.vtamod", manifest, arrays, valid[5])
        # an infinite number drawn into the manifest is refused even before the signature (JSON has none)
        with pytest.raises(CompileError, match="not signed by this machine's key|Infinity is not JSON"):
            CompiledModule.load(path)
        load_and_run(path, valid[3], valid[4], trust=True)
