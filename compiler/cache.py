"""The compile cache: a recompile of an unchanged model loads the module the first compile saved.

A user compiles the same model many times a day (another look at the report, a script run again); the
cache keys a compile by everything that decides its result, and stores the module as the signed
`.vtamod` the module container writes (never pickle):

    the model's content       the ONNX bytes, and every external data file they name (hashed, not dated)
    the calibration samples   each array's dtype, shape and bytes (none: the options' seed decides)
    the configuration         HwConfig.fingerprint()
    the options               CompileOptions as canonical JSON; arrays among them by content
    the code                  vtakit's version, a hash of its source files, numpy's, onnx's and Python's
                              versions, the names registered in the op, technique, option and lowering
                              registries, and the model-size limits in force

Entries live in $VTAKIT_CACHE_DIR, else $XDG_CACHE_HOME/vtakit/modules or ~/.cache/vtakit/modules, one file per key;
`cache=False` (`vtakit compile --no-cache`) or VTAKIT_COMPILE_CACHE=off turns the cache off.  A compile the key
cannot describe (a tuning log or other schedule table in force, a model or option of an unknown kind, an
external data file that is not a regular file in the model's folder) is neither looked up nor stored.
Writes go to a temporary file renamed into place, so a reader never sees half a module; an entry that
does not load (truncated, damaged, signed with another key) is a miss with a `CompileCacheWarning`,
and the compile that follows replaces it.  The oldest entries go once the cache holds more than
VTAKIT_CACHE_MB megabytes (default 2048).  What the key cannot see: code changed in a running process
(a monkeypatch, a plugin's function replaced under the same name); pass cache=False there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from vtakit.compiler.backends.vta import dispatch
from vtakit.compiler.backends.vta.lowering.steps import STEPS
from vtakit.compiler.frontend import limits
from vtakit.compiler.frontend.onnx_files import all_tensors, read_model_file
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.module.container import array_digest
from vtakit.compiler.ops.registry import OPS
from vtakit.compiler.options import QUANT_OPTIONS, CompileOptions
from vtakit.compiler.quant.techniques.registry import TECHNIQUES
from vtakit.errors import VtaError, one_line
from vtakit.files import regular_file
from vtakit.isa.config import HwConfig

LAYOUT = 1
"""The cache's own format: part of every key, so a change of layout never reads an old entry."""
SUFFIX = ".vtamod"
TEMP = ".tmp"
OFF = ("0", "off", "false", "no")
DEFAULT_MB = 2048


class CompileCacheWarning(UserWarning):
    """An entry that did not load, or a module that could not be stored: the compile goes on without."""


class _Unkeyable(Exception):
    """What the key cannot describe: the compile runs uncached."""


def enabled(cache: bool | None) -> bool:
    """`cache` if given, else on unless VTAKIT_COMPILE_CACHE says off."""
    if cache is not None:
        if not isinstance(cache, bool):
            raise VtaError(f"cache must be True, False or None, got {type(cache).__name__}")
        return cache
    return os.environ.get("VTAKIT_COMPILE_CACHE", "").strip().lower() not in OFF


def cache_dir() -> Path:
    """$VTAKIT_CACHE_DIR, else modules/ in $XDG_CACHE_HOME/vtakit or ~/.cache/vtakit (the RTL builds'
    folder, hw/build.py, holds its own beside it)."""
    explicit = os.environ.get("VTAKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vtakit" / "modules"


def _budget_bytes() -> int:
    text = os.environ.get("VTAKIT_CACHE_MB", "")
    try:
        mb = float(text) if text else DEFAULT_MB
    except ValueError:
        raise VtaError(f"VTAKIT_CACHE_MB must be a number of megabytes, got {text[:40]!r}") from None
    return max(0, int(mb * (1 << 20)))


# ------------------------------------------------------------------------- the key
def key(model, cfg: HwConfig, options: CompileOptions, calibrate) -> str | None:
    """The hex digest naming this compile's entry, or None when the key cannot describe it."""
    if dispatch.active_tables():
        return None  # a tuning log's schedules: the cache cannot see which a table would give
    try:
        parts = {"layout": LAYOUT, "code": code_digest(), "model": model_digest(model),
                 "calibration": calibration_digest(calibrate), "config": cfg.fingerprint(),
                 "options": _canonical(options), "limits": _canonical(limits.LIMITS)}
    except _Unkeyable:
        return None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 over the path and bytes of every Python file of the vtakit package (its layers included)."""
    spec = importlib.util.find_spec("vtakit")
    roots = spec.submodule_search_locations if spec is not None else None
    if not roots:
        raise _Unkeyable("vtakit's sources not found")
    root = Path(list(roots)[0])  # the layers are links inside it (a checkout) or folders (a wheel)
    sources = []
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        sources += [Path(folder) / name for name in files if name.endswith(".py")]
    h = hashlib.sha256()
    for path in sorted(sources):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def code_digest() -> str:
    """The code that compiles: vtakit's sources and version, the libraries whose arithmetic it uses, and
    what is registered now (a plugin's op, technique, option or lowering step)."""
    try:
        version = metadata.version("vtakit")
    except metadata.PackageNotFoundError:
        version = "uninstalled"
    registered = {"ops": sorted(OPS), "techniques": sorted(TECHNIQUES), "options": sorted(QUANT_OPTIONS),
                  "steps": sorted(STEPS)}
    text = json.dumps([version, source_digest(), np.__version__, onnx.__version__, platform.python_version(),
                       sys.byteorder, registered])
    return hashlib.sha256(text.encode()).hexdigest()


def model_digest(model) -> str:
    """sha256 of the model's content: a file's bytes and the external data files it names, bytes as given,
    or a ModelProto's serialisation."""
    if isinstance(model, onnx.ModelProto):
        return hashlib.sha256(model.SerializeToString()).hexdigest()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(model)).hexdigest()
    if not isinstance(model, (str, os.PathLike)):
        raise _Unkeyable(type(model).__name__)
    try:
        data = read_model_file(model)
    except VtaError:
        raise _Unkeyable("unreadable model") from None  # the import says why, in its own words
    h = hashlib.sha256(data)
    if b"location" in data:  # external data names its file by a "location" entry; no entry, no file
        folder = Path(model).resolve().parent
        try:
            proto = onnx.ModelProto.FromString(data)
        except Exception:  # noqa: BLE001 - not a model: the import refuses it in its own words
            raise _Unkeyable("unparsable model") from None
        names = sorted({e.value for t, *_ in all_tensors(proto) for e in getattr(t, "external_data", ())
                        if e.key == "location"})
        for name in names:
            h.update(name.encode() + b"\0" + _file_digest(folder, name).encode())
    return h.hexdigest()


def _file_digest(folder: Path, name: str) -> str:
    path = (folder / name).resolve()
    if folder not in path.parents:
        raise _Unkeyable("external data outside the model's folder")
    try:
        regular_file(path, "external data file")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    except (VtaError, OSError):
        raise _Unkeyable("unreadable external data") from None
    return h.hexdigest()


def calibration_digest(calibrate) -> str:
    """sha256 of the calibration samples (arrays, or dicts of them by input name), in order."""
    if calibrate is None:
        return "none"
    if isinstance(calibrate, np.ndarray):
        return array_digest(calibrate)
    if not isinstance(calibrate, (list, tuple)):
        raise _Unkeyable(type(calibrate).__name__)
    h = hashlib.sha256()
    for sample in calibrate:
        items = sorted(sample.items(), key=lambda kv: str(kv[0])) if isinstance(sample, Mapping) else [("", sample)]
        for name, value in items:
            array = np.asarray(value)
            if array.dtype == object:
                raise _Unkeyable("calibration sample of objects")
            h.update(str(name).encode() + b"\0" + array_digest(array).encode())
        h.update(b"\1")
    return h.hexdigest()


def _canonical(value: Any) -> Any:
    """`value` as plain JSON data that two equal option sets share and two different ones do not."""
    if isinstance(value, Enum):
        return [type(value).__name__, _canonical(value.value)]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, np.generic):
        return _canonical(value.item())
    if isinstance(value, np.ndarray):
        return ["array", array_digest(value)]
    if is_dataclass(value) and not isinstance(value, type):
        return [type(value).__qualname__, {f.name: _canonical(getattr(value, f.name)) for f in fields(value)}]
    if isinstance(value, Mapping):
        return ["map", sorted([str(k), _canonical(v)] for k, v in value.items())]
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    raise _Unkeyable(type(value).__name__)


# ------------------------------------------------------------------------ the store
def entry(digest: str, folder: Path | None = None) -> Path:
    return (folder or cache_dir()) / f"{digest}{SUFFIX}"


def load(digest: str, folder: Path | None = None) -> CompiledModule | None:
    """The module stored under `digest`, or None: absent, or (with a warning) not loadable."""
    path = entry(digest, folder)
    if not path.is_file():
        return None
    try:
        module = CompiledModule.load(path)
        os.utime(path)  # recently used: the last to go when the cache outgrows its budget
        module.notes = replace(module.notes, cached_from=str(path))
        return module
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged entry of any kind is a miss, never a failed compile
        warnings.warn(f"compile cache entry {path} did not load, compiling again: {one_line(str(e))}",
                      CompileCacheWarning, stacklevel=3)
        return None


def store(digest: str, module: CompiledModule, folder: Path | None = None) -> Path | None:
    """Save `module` under `digest` (written beside, then renamed into place); None, with a warning,
    when the cache cannot be written."""
    path = entry(digest, folder)
    temp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{digest[:16]}.", suffix=TEMP, dir=path.parent)
        os.close(handle)
        temp = Path(name)
        module.save(temp)
        os.replace(temp, path)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a full disk, a read-only folder: the module is still returned
        if temp is not None:
            temp.unlink(missing_ok=True)
        warnings.warn(f"compile cache: could not store {path}: {one_line(str(e))}", CompileCacheWarning,
                      stacklevel=3)
        return None
    _trim(path.parent, keep=path)
    return path


def _trim(folder: Path, keep: Path) -> None:
    """Remove the least recently used entries while the cache holds more than its budget."""
    budget = _budget_bytes()
    try:
        for temp in folder.glob(f".*{TEMP}"):  # left by a compile killed while it stored
            if temp.stat().st_mtime < time.time() - 3600:
                temp.unlink(missing_ok=True)
        entries = sorted(((p.stat().st_mtime, p.stat().st_size, p) for p in folder.glob(f"*{SUFFIX}")),
                         key=lambda e: e[0])
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= budget:
            break
        if path != keep:
            path.unlink(missing_ok=True)
            total -= size
