"""The `.vtamod` container: a zip of `.npy` arrays plus a JSON manifest, read with caps and hashes.

A module file comes from anywhere (a colleague, a download), so reading one trusts nothing: every
member's declared size is checked against a cap before a byte is decompressed (a 2 MB file could
otherwise expand to gigabytes), every `.npy` header must describe exactly the bytes the member
holds, nothing is unpickled, and the manifest carries a sha256 of every array and of itself, so a
damaged or edited file is refused in one line.  Hashes stop accidents and careless edits, not an
attacker (who can recompute them): the manifest is also signed with this user's key (signing.py),
and a module not signed with it is refused unless trusted; `module.check` validates every field
on its own, trusted or not.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.compiler.module import signing
from vtakit.errors import CompileError
from vtakit.files import regular_file

FORMAT = "vtakit-module"
VERSION = 2
"""1: before content hashes (refused: recompile); 2: sha256 of every array and of the manifest."""

MB = 1 << 20
MAX_BYTES = 2048 * MB
"""Default cap on a module's decompressed size; `load(max_bytes=)`, `--max-module-mb` or the
VTAKIT_MAX_MODULE_MB environment variable raise it."""
MAX_MEMBERS = 100_000
MANIFEST = "manifest"
UNHASHED = ("sha256", "signature")
"""Manifest entries outside its canonical body: the hash and the signature are of the rest."""


def default_max_bytes() -> int:
    """The cap in force: VTAKIT_MAX_MODULE_MB when set, else MAX_BYTES."""
    env = os.environ.get("VTAKIT_MAX_MODULE_MB")
    if not env:
        return MAX_BYTES
    try:
        mb = float(env)
    except ValueError:
        mb = -1.0
    if not mb > 0 or mb == float("inf"):
        raise CompileError(f"VTAKIT_MAX_MODULE_MB must be a positive number of megabytes, got {env[:40]!r}")
    return int(mb * MB)


def array_digest(a: np.ndarray) -> str:
    """sha256 of an array's dtype, shape and C-order bytes."""
    h = hashlib.sha256(f"{a.dtype.str}{tuple(a.shape)}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def manifest_body(manifest: dict[str, Any]) -> bytes:
    """The manifest's canonical JSON without its `sha256` and `signature` entries: what both cover."""
    return json.dumps({k: v for k, v in manifest.items() if k not in UNHASHED}, sort_keys=True).encode()


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical body."""
    return hashlib.sha256(manifest_body(manifest)).hexdigest()


def write_module(path: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Save `arrays` (names may hold "/") and `manifest`, which gains the hashes of both and is signed
    with this user's key (made on first use, see signing.py)."""
    manifest = dict(manifest, format=FORMAT, version=VERSION,
                    arrays={k: array_digest(v) for k, v in arrays.items()})
    manifest["signature"] = signing.signature(manifest_body(manifest))
    manifest["sha256"] = manifest_digest(manifest)
    members = {k.replace("/", "|"): v for k, v in arrays.items()}
    members[MANIFEST] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    target = Path(path)
    if target.exists() and not target.is_file():  # /dev/full, a folder: never write into a device
        raise CompileError(f"cannot write module file {path}: not a regular file")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            np.savez(f, **members)
    except OSError as e:
        raise CompileError(f"cannot write module file {path}: {e.strerror or e}") from None


def read_module(path, max_bytes: int | None = None,
                trust: bool = False) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The manifest and the arrays (names with "/") of a module file, every hash checked, and its
    signature with this user's key unless `trust` (a module from elsewhere, reviewed)."""
    if not isinstance(trust, bool):  # trust="no" from a config file must not turn the signature check off
        raise CompileError(f"trust must be True or False, got {type(trust).__name__} {str(trust)[:40]!r}")
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
        raise CompileError(f"max_bytes must be a positive integer, got {str(max_bytes)[:40]!r}")
    cap = default_max_bytes() if max_bytes is None else max_bytes
    try:
        if not Path(path).exists():
            raise CompileError(f"no such module file: {path}")
        regular_file(path, "module file", CompileError)  # a FIFO would block open(), /dev/zero never end
        with open(path, "rb") as f, zipfile.ZipFile(f) as zf:
            arrays = _read_members(path, zf, cap)
        raw = arrays.pop(MANIFEST, None)
        if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
            raise CompileError(f"{path}: not a vtakit module (no manifest)")
        manifest = json.loads(raw.tobytes().decode(), parse_constant=_no_constant)
    except CompileError:
        raise
    except Exception as e:  # zipfile, json and numpy raise many kinds for a damaged file
        raise CompileError(f"{path}: not a vtakit module ({type(e).__name__}: {e})") from None
    _check_hashes(path, manifest, arrays)
    if not trust:
        signing.verify(path, manifest.get("signature"), manifest_body(manifest))
    return manifest, arrays


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _read_members(path, zf: zipfile.ZipFile, cap: int) -> dict[str, np.ndarray]:
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise CompileError(f"{path}: {len(infos)} archive members (at most {MAX_MEMBERS})")
    total = 0
    for info in infos:
        total += info.file_size
        if total > cap:
            raise CompileError(f"{path}: expands to more than {cap // MB} MB (member {info.filename[:80]!r} "
                               f"declares {info.file_size:,} bytes); if the module is trusted, raise the cap "
                               f"with --max-module-mb or VTAKIT_MAX_MODULE_MB")
    arrays: dict[str, np.ndarray] = {}
    for info in infos:
        name = info.filename
        if not name.endswith(".npy") or info.is_dir():
            raise CompileError(f"{path}: unexpected archive member {name[:80]!r}")
        key = name[:-4] if name[:-4] == MANIFEST else name[:-4].replace("|", "/")
        if key in arrays:
            raise CompileError(f"{path}: archive member {name[:80]!r} appears twice")
        with zf.open(info) as member:
            arrays[key] = _read_npy(path, name, member, info.file_size)
    return arrays


def _read_npy(path, name: str, member, size: int) -> np.ndarray:
    """One `.npy` member whose header must describe exactly its `size` bytes (no object dtypes)."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise CompileError(f"{path}: member {name[:80]!r} has .npy version {version}")
    if dtype.hasobject or dtype.kind not in "biuf":
        raise CompileError(f"{path}: member {name[:80]!r} holds {dtype}, not numbers")
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    header = member.tell()
    if header + nbytes != size:
        raise CompileError(f"{path}: member {name[:80]!r} declares {shape} {dtype} ({nbytes:,} bytes) but holds "
                           f"{size - header:,}")
    data = member.read(nbytes)
    if len(data) != nbytes or member.read(1):
        raise CompileError(f"{path}: member {name[:80]!r} is truncated")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C").copy()


def _check_hashes(path, manifest: Any, arrays: dict[str, np.ndarray]) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CompileError(f"{path}: not a vtakit module")
    version = manifest.get("version")
    if version != VERSION:
        if isinstance(version, int) and version < VERSION:
            raise CompileError(f"{path}: a module of format version {version} (before content hashes): "
                               f"recompile it with `vtakit compile`")
        raise CompileError(f"{path}: unknown module format version {str(version)[:20]!r} "
                           f"(this vtakit reads version {VERSION})")
    if manifest.get("sha256") != manifest_digest(manifest):
        raise CompileError(f"{path}: the manifest does not match its sha256: the file was modified or damaged")
    table = manifest.get("arrays")
    if not isinstance(table, dict) or set(table) != set(arrays):
        names = set(table) if isinstance(table, dict) else set()
        odd = sorted(names ^ set(arrays))[:3]
        raise CompileError(f"{path}: the arrays do not match the manifest's list (first differences: {odd})")
    for name, a in arrays.items():
        if table[name] != array_digest(a):
            raise CompileError(f"{path}: array {name!r} does not match its sha256: the file was modified or "
                               f"damaged")
