"""Kernel keys, where each kernel comes from, and the in-process cache.

Every kernel is a `void name(ptr noalias ...)` function in its own module, specialised on shapes and
parameters; `KernelKey` names it.  `get_kernel` finds a kernel once per key and process, in order: in
the process; where llvmlite is missing (a board), in the prebuilt library a module brought (aot.py); in
this machine's on-disk cache (objcache.py), a library per kernel loaded with ctypes; else it generates
the IR, compiles it with llvmlite (and keeps it on disk).  The time spent finding kernels is counted
apart (`cache_info`), so callers never count it as run time.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.compiler.backends.cpu.objcache import Kernel, Library, kernel_cache_dir, link, linker, store
from vtakit.compiler.backends.cpu.targets import HostTarget, NamedTarget, generator_hash
from vtakit.errors import CompileError, pc_side_missing

try:
    from vtakit.compiler.backends.cpu import codegen
    from vtakit.compiler.backends.cpu.codegen import compile_ir  # noqa: F401  (tests compile IR of their own)
except ImportError as missing:  # a board's runtime: no llvmlite (or one older than 0.45); kernels come prebuilt
    pc_side_missing(missing)
    codegen = None

CompiledKernel = Kernel
HOST_FAMILIES = frozenset({"conv2d", "conv2d_depthwise", "dense", "matmul", "elementwise", "copy", "pool2d",
                           "global_avg_pool", "softmax"})
"""The CPU backend's kernels: pointer arguments only, nothing resolved from Python, so they live in libraries."""


class KernelUnavailable(CompileError):
    """No kernel for a key here: no llvmlite to build it and no prebuilt library holding it (cpu/ then runs
    the numpy kernel for that call)."""


class KernelCacheWarning(UserWarning):
    """The on-disk kernel cache could not be used (unwritable, no linker): kernels compile in the process."""


@dataclass(frozen=True)
class KernelKey:
    """What a compiled kernel is specialised on: its family and every parameter."""

    family: str
    params: tuple[Any, ...]


@dataclass(frozen=True)
class CacheInfo:
    """Kernels compiled and loaded (from disk or a module's library) since the last clear; the seconds spent
    compiling, and everything spent on first uses (planning calls, loading, compiling): what a first run pays
    and a warm one does not."""

    kernels: int
    compile_seconds: float
    loaded: int = 0
    seconds: float = 0.0


def _canonical(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__, {f.name: _canonical(getattr(value, f.name)) for f in fields(value)}]
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    raise TypeError(f"no canonical form for {type(value).__name__}")


def kernel_symbol(key: KernelKey) -> str | None:
    """The library symbol of a CPU kernel: a digest of its key (None for kernels that do not live in libraries)."""
    if key.family not in HOST_FAMILIES:
        return None
    try:
        text = json.dumps([key.family, _canonical(key.params)], separators=(",", ":"))
    except TypeError:
        return None
    return "vtk_" + hashlib.sha256(text.encode()).hexdigest()[:40]


_cache: dict[KernelKey, Kernel] = {}
_plans: dict[tuple, Any] = {}
_lock = threading.RLock()
_counts = {"compiled": 0, "compile_seconds": 0.0, "loaded": 0, "seconds": 0.0}
_depth = threading.local()  # nesting of first uses (a plan that gets a kernel): timed once, at the outside
_libraries: dict[str, Library] = {}     # symbol -> a module's prebuilt library holding it (no llvmlite here)
_prebuilt: list[HostTarget] = []        # the CPU those libraries were built for (one per process)
_building: NamedTarget | None = None    # inside building_for: the target kernels are generated for
_collected: dict[str, tuple[str, str, str, str]] | None = None
_disk_warned = False


def can_build() -> bool:
    """Whether this process can generate and compile kernels (llvmlite >= 0.45 is installed)."""
    return codegen is not None


def host_target() -> HostTarget:
    """The vector shape kernels are planned for: the target being built for, this CPU, or the prebuilt one."""
    if _building is not None:
        return _building.host
    if codegen is not None:
        return codegen.host_target()
    if _prebuilt:
        return _prebuilt[0]
    raise KernelUnavailable("native host kernels need llvmlite or a module's prebuilt library")


def module_header() -> tuple[str, str]:
    """(triple, data layout) to stamp on generated modules."""
    if codegen is None:
        raise KernelUnavailable("generating host kernels needs llvmlite")
    return codegen.module_header(_building)


_folders: dict[Path, Path | None] = {}


def _disk_folder() -> Path | None:
    """This machine's folder in the kernel cache (None: the cache is off, or nothing here links a library)."""
    setting = kernel_cache_dir()
    if setting is None or codegen is None:
        return None
    if setting not in _folders:
        identity = f"{codegen.host_identity()}|{generator_hash()}"
        usable = linker(None) is not None
        _folders[setting] = setting / hashlib.sha256(identity.encode()).hexdigest()[:20] if usable else None
    return _folders[setting]


def _from_disk(folder: Path, symbol: str, build: Callable[[], tuple[str, str, list[Any]]], op: str) -> Kernel:
    """The kernel from this machine's cache, compiled, linked and stored there first on a miss."""
    global _disk_warned
    path = folder / f"{symbol}.so"
    assert codegen is not None
    start = time.perf_counter()
    if path.is_file():
        try:
            library = Library(path)
            if symbol in library.kernels:
                _counts["loaded"] += 1
                return Kernel(library, library.function(symbol), 0.0)
        except CompileError:
            pass  # damaged: built again below
    ir_text, name, argtypes = build()
    host = codegen.host_target()
    obj = codegen.emit_object({symbol: (ir_text, name, codegen.argument_codes(argtypes), op)}, None, host,
                              generator_hash())
    try:
        store(path, link(obj, None))
        library = Library(path)
    except (OSError, CompileError) as e:
        if not _disk_warned:
            _disk_warned = True
            warnings.warn(f"host kernels are not cached on disk ({e}); they compile in each process",
                          KernelCacheWarning, stacklevel=4)
        return _compiled(ir_text, name, argtypes, op)
    _counts["compiled"] += 1
    _counts["compile_seconds"] += time.perf_counter() - start
    return Kernel(library, library.function(symbol), time.perf_counter() - start)


def _compiled(ir_text: str, name: str, argtypes: list[Any], op: str) -> Kernel:
    assert codegen is not None
    kernel = codegen.compile_ir(ir_text, name, argtypes, op)
    _counts["compiled"] += 1
    _counts["compile_seconds"] += kernel.compile_seconds
    return kernel


def _noop(*args: Any) -> None:
    """What a kernel call does while kernels are collected for another CPU (building_for): nothing."""


def _obtain(key: KernelKey, build: Callable[[], tuple[str, str, list[Any]]], op: str) -> Kernel:
    symbol = kernel_symbol(key)
    if _collected is not None:
        if symbol is None:
            raise CompileError(f"kernel family {key.family!r} cannot be built ahead of time", op=op)
        if symbol not in _collected:
            ir_text, name, argtypes = build()
            assert codegen is not None
            _collected[symbol] = (ir_text, name, codegen.argument_codes(argtypes), op)
        return Kernel(None, _noop, 0.0)
    if codegen is None:
        library = _libraries.get(symbol) if symbol is not None else None
        if library is None:
            raise KernelUnavailable("no prebuilt kernel for this call in the module, and no llvmlite to build one",
                                    op=op)
        _counts["loaded"] += 1
        return Kernel(library, library.function(symbol), 0.0)
    folder = _disk_folder() if symbol is not None else None
    if folder is not None:
        return _from_disk(folder, symbol, build, op)
    return _compiled(*build(), op)


def _first_use(make: Callable[[], Any]) -> Any:
    """make(), its time added to the first-use seconds unless an outer first use is already timing."""
    if getattr(_depth, "n", 0):
        return make()
    _depth.n = 1
    start = time.perf_counter()
    try:
        return make()
    finally:
        _depth.n = 0
        _counts["seconds"] += time.perf_counter() - start


def get_kernel(key: KernelKey, build: Callable[[], tuple[str, str, list[Any]]], op: str) -> Kernel:
    """The cached kernel for `key`, found or built (IR text, function name, ctypes argtypes) on a miss."""
    with _lock:
        kernel = _cache.get(key)
        if kernel is None:
            kernel = _first_use(lambda: _obtain(key, build, op))
            _cache[key] = kernel
        return kernel


def cached_plan(signature: tuple, make: Callable[[], Any]) -> Any:
    """Memo in front of `get_kernel` keyed by what a call can see cheaply (shapes, dtype chars, params).

    Building a KernelKey (broadcast strides, collapsed shapes) costs more than a
    small kernel runs; a plan caches its result per call signature.  Plans hold
    kernels, so `clear_cache` drops them too.
    """
    plan = _plans.get(signature)
    if plan is None:
        plan = _first_use(make)
        with _lock:
            _plans[signature] = plan
    return plan


@contextmanager
def building_for(target: NamedTarget) -> Iterator[dict[str, tuple[str, str, str, str]]]:
    """Inside the block, kernel calls plan for `target`'s vector shape and collect each kernel's IR (symbol ->
    (IR text, function name, argument codes, op)) instead of running: the calls only name the kernels."""
    global _cache, _plans, _building, _collected
    if codegen is None:
        raise KernelUnavailable("building host kernels ahead of time needs llvmlite")
    with _lock:
        saved = (_cache, _plans, _building, _collected)
        _cache, _plans, _building, _collected = {}, {}, target, {}
        try:
            yield _collected
        finally:
            _cache, _plans, _building, _collected = saved


def add_library(library: Library) -> str:
    """Use a module's prebuilt library where llvmlite is missing; returns why not ("" when used)."""
    if library.source != generator_hash():
        return "its kernels were built by other vtakit sources"
    with _lock:
        if _prebuilt and _prebuilt[0] != library.host:
            return f"another library for a {_prebuilt[0].cpu} is in use"
        if not _prebuilt:
            _prebuilt.append(library.host)
        for symbol in library.kernels:
            _libraries.setdefault(symbol, library)
    return ""


def prebuilt_target() -> HostTarget | None:
    """The CPU of the prebuilt libraries in use (None: none is)."""
    return _prebuilt[0] if _prebuilt else None


def cache_info() -> CacheInfo:
    """How many kernels are compiled and loaded, and how long that took."""
    with _lock:
        return CacheInfo(_counts["compiled"], _counts["compile_seconds"], _counts["loaded"], _counts["seconds"])


def clear_cache() -> None:
    """Drop every kernel of the process (the next call of each shape compiles or loads again)."""
    with _lock:
        _cache.clear()
        _plans.clear()
        _counts.update(compiled=0, compile_seconds=0.0, loaded=0, seconds=0.0)
