"""The `.pth` reader: both of torch's formats read right, and a hostile file is one ZooError.

The files are written here without torch: fake `torch` / `torch._utils` modules give the pickler
the same global names torch writes, so the bytes have torch's layout (legacy: five pickles and
raw storages; zip: `archive/data.pkl` plus one member per storage).
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

import numpy as np
import pytest

from vtakit.compiler.zoo.torch_weights import LEGACY_MAGIC, load_state_dict
from vtakit.errors import ZooError


class _Storage:
    def __init__(self, key: str, data: np.ndarray):
        self.key, self.data = key, data


class _Tensor:
    def __init__(self, storage, offset=0, size=(), stride=(), state=None):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())
        self.state = state

    def __reduce__(self):
        rebuild = sys.modules["torch._utils"]._rebuild_tensor_v2
        return (rebuild, self.args) if self.state is None else (rebuild, self.args, self.state)


class _Payload:
    """Pickles as a call to os.mkdir: were it unpickled, the folder would appear."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.fixture
def fake_torch(monkeypatch):
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):  # only its name is pickled
        raise AssertionError

    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    for name in ("FloatStorage", "LongStorage"):
        setattr(torch, name, type(name, (), {"__module__": "torch"}))
    torch._utils = utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            kind = "FloatStorage" if obj.data.dtype == np.float32 else "LongStorage"
            return ("storage", getattr(sys.modules["torch"], kind), obj.key, "cpu", obj.data.size, None)
        return None


def _dumps(obj) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def write_legacy(path, state, storages, *, pickles=None, counts=None):
    """A legacy-format file; `pickles` overrides any of the five pickles by position."""
    parts = [pickle.dumps(LEGACY_MAGIC, protocol=2), pickle.dumps(1001, protocol=2),
             pickle.dumps({"little_endian": True}, protocol=2), _dumps(state),
             pickle.dumps([s.key for s in storages], protocol=2)]
    for i, raw in (pickles or {}).items():
        parts[i] = raw
    with open(path, "wb") as f:
        f.write(b"".join(parts))
        for s in storages:
            count = s.data.size if counts is None else counts[s.key]
            f.write(struct.pack("<q", count) + s.data.tobytes())


def write_zip(path, state, storages, *, data_pkl=None):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _dumps(state) if data_pkl is None else data_pkl)
        for s in storages:
            z.writestr(f"archive/data/{s.key}", s.data.tobytes())


def _model():
    w = _Storage("0", np.arange(12, dtype=np.float32))
    n = _Storage("1", np.array([7], np.int64))
    state = collections.OrderedDict(weight=_Tensor(w, 0, (3, 4), (4, 1)), weight_t=_Tensor(w, 0, (4, 3), (1, 4)),
                                    tail=_Tensor(w, 8, (4,), (1,)), steps=_Tensor(n, 0, (), ()))
    return state, [w, n]


@pytest.mark.parametrize("writer", [write_legacy, write_zip])
def test_both_formats_read_views_exactly(fake_torch, tmp_path, writer):
    state, storages = _model()
    writer(tmp_path / "w.pth", state, storages)
    got = load_state_dict(tmp_path / "w.pth")
    base = np.arange(12, dtype=np.float32)
    np.testing.assert_array_equal(got["weight"], base.reshape(3, 4))
    np.testing.assert_array_equal(got["weight_t"], base.reshape(3, 4).T)
    np.testing.assert_array_equal(got["tail"], base[8:])
    assert got["steps"].dtype == np.int64 and got["steps"] == 7


@pytest.mark.parametrize("position", range(5))
def test_no_pickle_of_a_legacy_file_runs_code(fake_torch, tmp_path, position):
    """Every one of the five pickles: the first used to be read with plain pickle.load."""
    state, storages = _model()
    marker = tmp_path / "pwned"
    write_legacy(tmp_path / "w.pth", state, storages, pickles={position: pickle.dumps(_Payload(marker))})
    with pytest.raises(ZooError, match="posix.mkdir|names"):
        load_state_dict(tmp_path / "w.pth")
    assert not marker.exists()


def test_zip_payload_does_not_run(fake_torch, tmp_path):
    marker = tmp_path / "pwned"
    write_zip(tmp_path / "w.pth", {}, [], data_pkl=pickle.dumps({"w": _Payload(marker)}))
    with pytest.raises(ZooError):
        load_state_dict(tmp_path / "w.pth")
    assert not marker.exists()


@pytest.mark.parametrize("writer", [write_legacy, write_zip])
@pytest.mark.parametrize("offset, size, stride", [
    (0, (4, 4), (1 << 40, 1)),       # a stride far outside the storage (was a segmentation fault)
    (0, (1 << 20,), (1,)),           # more elements than the storage (was process heap as weights)
    (100, (2,), (1,)),               # an offset past the end
    (0, (2, 2), (-1, 1)),            # a negative stride
    (0, (2, 2), (1,)),               # size and stride of different ranks
    (-1, (1,), (1,)),                # a negative offset
    (0, (2, "x"), (1, 1)),           # a size that is not an integer
])
def test_views_are_checked_against_their_storage(fake_torch, tmp_path, writer, offset, size, stride):
    w = _Storage("0", np.arange(12, dtype=np.float32))
    writer(tmp_path / "w.pth", {"w": _Tensor(w, offset, size, stride)}, [w])
    with pytest.raises(ZooError, match="storage 0|tensor"):
        load_state_dict(tmp_path / "w.pth")


def test_pickle_cannot_overwrite_a_checked_tensor(fake_torch, tmp_path):
    """pickle's BUILD opcode would set the fields after the checks."""
    w = _Storage("0", np.arange(12, dtype=np.float32))
    write_zip(tmp_path / "w.pth", {"w": _Tensor(w, 0, (2,), (1,), state=(None, {"stride": (1 << 40,)}))}, [w])
    with pytest.raises(ZooError, match="sets the state"):
        load_state_dict(tmp_path / "w.pth")


def test_legacy_storage_count_beyond_the_file(fake_torch, tmp_path):
    state, storages = _model()
    write_legacy(tmp_path / "w.pth", state, storages, counts={"0": 1 << 40, "1": 1})
    with pytest.raises(ZooError, match="more than the file holds"):
        load_state_dict(tmp_path / "w.pth")


def test_truncated_and_garbage_files(fake_torch, tmp_path):
    state, storages = _model()
    write_legacy(tmp_path / "w.pth", state, storages)
    whole = (tmp_path / "w.pth").read_bytes()
    for cut in (3, len(whole) // 2, len(whole) - 5):
        (tmp_path / "cut.pth").write_bytes(whole[:cut])
        with pytest.raises(ZooError):
            load_state_dict(tmp_path / "cut.pth")
    (tmp_path / "junk.pth").write_bytes(os.urandom(256))
    with pytest.raises(ZooError):
        load_state_dict(tmp_path / "junk.pth")
    with pytest.raises(ZooError, match="not a regular file"):
        load_state_dict(tmp_path)


def test_zip_member_size_is_checked_before_reading(fake_torch, tmp_path):
    state, storages = _model()
    write_zip(tmp_path / "w.pth", state, storages)
    with pytest.raises(ZooError, match="member archive/data.pkl needs .* past the reader's limit of 40"):
        load_state_dict(tmp_path / "w.pth", max_bytes=40)


def test_missing_storage_member(fake_torch, tmp_path):
    state, storages = _model()
    write_zip(tmp_path / "w.pth", state, storages[:1])
    with pytest.raises(ZooError, match="no member archive/data/1"):
        load_state_dict(tmp_path / "w.pth")


@pytest.mark.parametrize("writer", [write_legacy, write_zip])
def test_a_zero_stride_cannot_blow_a_small_storage_up(fake_torch, tmp_path, writer):
    """A valid view (stride 0 repeats one element) whose copy would be 4 TiB: refused before allocating."""
    w = _Storage("0", np.arange(4, dtype=np.float32))
    writer(tmp_path / "w.pth", {"w": _Tensor(w, 0, (1 << 40,), (0,))}, [w])
    with pytest.raises(ZooError, match=r"a tensor of size \(1099511627776,\) needs"):
        load_state_dict(tmp_path / "w.pth")


def test_storages_and_tensors_count_against_one_budget(fake_torch, tmp_path):
    state, storages = _model()
    write_legacy(tmp_path / "w.pth", state, storages)
    assert load_state_dict(tmp_path / "w.pth", max_bytes=48 + 8 + 48 * 2 + 16 + 8)["tail"].size == 4
    with pytest.raises(ZooError, match="past the reader's limit"):
        load_state_dict(tmp_path / "w.pth", max_bytes=48 + 8 + 48 * 2 + 16 + 7)
