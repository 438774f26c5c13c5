"""Reading and writing the files users name, with the checks every loader needs.

A path on the command line can be a FIFO (opening it waits for a writer forever), `/dev/zero`
(reading it never ends), a sparse file of terabytes, or a zip archive whose members expand a
thousandfold.  Each loader asks here first, so each of those is one error line naming the file,
never a hang or an allocation that exhausts memory.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from vtakit.errors import VtaError

MB = 1 << 20


def regular_file(path, what: str, error: type[VtaError] = VtaError) -> Path:
    """`path` as a Path, when it names an existing regular file (not a folder, FIFO or device)."""
    p = Path(path)
    try:
        if p.is_file():
            return p
        exists = p.exists()
    except OSError as e:  # a name too long to look up, ...
        raise error(f"cannot open {what} {str(path)[:200]}: {e.strerror}") from None
    raise error(f"{what} {path} is not a regular file" if exists else f"{what} {path} does not exist")


def read_limited(path, what: str, max_bytes: int, error: type[VtaError] = VtaError) -> bytes:
    """The bytes of a regular file of at most `max_bytes`, its size checked before it is read."""
    p = regular_file(path, what, error)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise error(f"{what} {path} holds {size:,} bytes, more than the {max_bytes // MB} MiB such a file may")
        with p.open("rb") as f:
            return f.read(max_bytes + 1)[:max_bytes]
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror}") from None


def check_archive(path, what: str, max_bytes: int, error: type[VtaError] = VtaError) -> Path:
    """A regular `.npz` (zip) file whose members declare at most `max_bytes` in all, checked before
    numpy decompresses anything (a 3 MB archive can declare gigabytes of zeros)."""
    p = regular_file(path, what, error)
    try:
        with zipfile.ZipFile(p) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise error(f"{what} {path} is not a readable archive ({type(e).__name__})") from None
    if declared > max_bytes:
        raise error(f"{what} {path} expands to {declared:,} bytes, more than the {max_bytes // MB} MiB such a "
                    f"file may hold")
    return p


def make_parent(path, what: str, error: type[VtaError] = VtaError) -> Path:
    """`path` with its folder created, so writing it fails only for a real reason (one error line)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(f"cannot create the folder of {what} {path}: {e.strerror}") from None
    return p
