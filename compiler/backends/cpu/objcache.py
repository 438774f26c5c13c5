"""Shared libraries of host kernels: linked from LLVM's objects, kept on disk, loaded with ctypes.

On the PC each kernel is compiled once per CPU and kept under $VTAKIT_KERNEL_CACHE (default: kernels/
in $VTAKIT_CACHE or ~/.cache/vtakit; "off" keeps kernels in the process only), so a fresh process loads
it instead of compiling it again.  The linker is the system's `cc` for this machine, else the `ziglang`
wheel's (`python -m ziglang cc`), which also links for the named targets (armv7, aarch64) against their
libc stubs and compiler-rt.  Loading needs ctypes alone: a board's runtime loads a module's libraries.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vtakit.compiler.backends.cpu.targets import HostTarget, NamedTarget, cache_root
from vtakit.errors import CompileError

INDEX_SYMBOL = "vtakit_kernel_index"
OFF = ("off", "0", "no", "false", "none")
LINK_TIMEOUT_S = 300  # zig's first link for a target builds its libc stubs (a minute or two)
_ARGTYPES = {"p": ctypes.c_void_p, "q": ctypes.c_int64}


def kernel_cache_dir() -> Path | None:
    """$VTAKIT_KERNEL_CACHE, else kernels/ in the build cache; None when the variable says off."""
    setting = os.environ.get("VTAKIT_KERNEL_CACHE", "").strip()
    if setting.lower() in OFF and setting:
        return None
    return Path(setting) if setting else cache_root() / "kernels"


def has_zig() -> bool:
    return importlib.util.find_spec("ziglang") is not None


def linker(target: NamedTarget | None) -> list[str] | None:
    """The command that links a shared library for `target` (None: this machine), or None if none is here."""
    if target is None:
        cc = shutil.which("cc")
        if cc:
            return [cc]
    if has_zig():
        command = [sys.executable, "-m", "ziglang", "cc"]
        return command if target is None else [*command, "-target", target.zig_target, f"-mcpu={target.zig_cpu}"]
    return None


def link(obj: bytes, target: NamedTarget | None) -> bytes:
    """A shared library (bytes) from one object: libm and libc as needed, compiler-rt for the helpers."""
    command = linker(target)
    if command is None:
        where = "this machine" if target is None else target.name
        raise CompileError(f"no linker for {where}: install the ziglang wheel (pip install ziglang)"
                           + ("" if target is not None else " or a C compiler (cc)"))
    with tempfile.TemporaryDirectory(prefix="vtakit-link-") as folder:
        source, library = Path(folder, "kernels.o"), Path(folder, "kernels.so")
        source.write_bytes(obj)
        argv = [*command, "-shared", "-o", str(library), str(source), "-lm", "-Wl,-z,noexecstack"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=LINK_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CompileError(f"linking host kernels failed: {e}") from None
        if done.returncode != 0 or not library.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise CompileError(f"linking host kernels failed ({' '.join(argv[:4])} ...): {' / '.join(tail)}")
        return library.read_bytes()


def store(path: Path, data: bytes) -> None:
    """Write `data` at `path` atomically (a temporary file renamed): readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class Kernel:
    """A native function and what keeps its code alive (an MCJIT engine, or a loaded library)."""

    def __init__(self, owner: Any, function: Any, seconds: float):
        self._owner = owner
        self.function = function
        self.compile_seconds = seconds

    def __call__(self, *args: Any) -> None:
        self.function(*args)


class Library:
    """A loaded kernel library: its index (what each symbol takes, the CPU it was built for)."""

    def __init__(self, path: Path):
        try:
            self.handle = ctypes.CDLL(str(path))
            raw = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(self.handle, INDEX_SYMBOL)))
            index = json.loads(raw.decode())
            self.host = HostTarget(**index["host"])
            self.source: str = index["source"]
            self.kernels: dict[str, str] = dict(index["kernels"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CompileError(f"cannot load host kernel library {path.name}: {e}") from None
        self.path = path

    def function(self, symbol: str) -> Any:
        """The ctypes function of `symbol`, its argument types set (the caller checked it is indexed)."""
        function = self.handle[symbol]
        function.argtypes = [_ARGTYPES[code] for code in self.kernels[symbol]]
        function.restype = None
        return function
