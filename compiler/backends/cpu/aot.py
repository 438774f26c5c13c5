"""Host kernels compiled ahead of time for named CPUs, shipped inside a module (issue 41).

A board has no llvmlite (there is none for 32-bit ARM), so the kernels a module's host part calls are
built on the PC: the module runs once on zeros (on the host kernels, and on the functional simulator
when it has accelerator tasks, whose host nodes read packed tiles), every kernel call is noted, and the
calls are planned again for each target's vector shape (`jit.building_for`) to name and generate its
kernels, which link into one shared library per target (`objcache.link`: the ziglang wheel links for
ARM).  The module stores the libraries as arrays, so the container's hashes and signature cover them.
At load, where llvmlite is missing, the library matching the machine is loaded with ctypes; a call
whose kernel the library lacks (another input shape) runs on numpy, counted in `cpu.implementation()`.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.cpu import jit, objcache
from vtakit.compiler.backends.cpu.targets import TARGETS, generator_hash, machine_target, named_targets
from vtakit.errors import CompileError, needs_full_install, pc_side_missing

try:
    from vtakit.compiler.backends.cpu import codegen
except ImportError as missing:  # a board's runtime: it loads libraries, it does not build them
    _NO_LLVM = pc_side_missing(missing)
    codegen = None


class HostKernelWarning(UserWarning):
    """A module holds prebuilt host kernels, but none this machine can use: its host part runs on numpy."""


def record_calls(module) -> list:
    """The kernel calls of one run of `module` on zeros: every node on the host kernels, and the host nodes
    beside the functional simulator's accelerator tasks (they read packed tiles: other shapes)."""
    feeds = {name: np.zeros(info.shape, info.dtype) for name, info in module.inputs.items()}
    last = module.last_run, module.last_host_kernels
    try:
        with cpu.recording() as calls:
            module.run(feeds, device="cpu")
            if module.vta_tasks():
                module.run(feeds, device="fsim")
    finally:
        module.last_run, module.last_host_kernels = last
    return calls


def build_libraries(module, targets: str | Sequence[str]) -> dict[str, np.ndarray]:
    """One shared library (uint8 bytes) per named target holding every kernel `module`'s host part calls."""
    chosen = named_targets(targets)
    if codegen is None:
        raise needs_full_install("building host kernels ahead of time", _NO_LLVM)
    calls = record_calls(module)
    libraries: dict[str, np.ndarray] = {}
    for target in chosen:
        with jit.building_for(target) as collected:
            cpu.replay(calls)
        obj = codegen.emit_object(collected, target, target.host, generator_hash())
        libraries[target.name] = np.frombuffer(objcache.link(obj, target), np.uint8).copy()
    return libraries


def library_kernels(data: np.ndarray) -> int:
    """How many kernels a stored library holds, read from its index without loading it (any machine)."""
    raw = data.tobytes()
    start = raw.find(b'{"host"')
    end = raw.find(b"\0", start)
    if start < 0 or end < 0:
        raise CompileError("a host kernel library without its index")
    return len(json.loads(raw[start:end])["kernels"])


def _library_file(data: bytes) -> Path:
    """The library's bytes as a file ctypes can load: content-addressed under the kernel cache, else a
    temporary folder (a read-only home)."""
    name = f"{hashlib.sha256(data).hexdigest()[:32]}.so"
    folder = objcache.kernel_cache_dir()
    for place in ([folder / "prebuilt"] if folder is not None else []):
        path = place / name
        try:
            if not path.is_file() or path.read_bytes() != data:
                objcache.store(path, data)
            return path
        except OSError:
            pass
    path = Path(tempfile.mkdtemp(prefix="vtakit-kernels-")) / name
    path.write_bytes(data)
    return path


def use_libraries(libraries: Mapping[str, np.ndarray], where: str = "the module") -> str:
    """Where llvmlite is missing, load the library of `libraries` that matches this machine for the native
    kernels; returns why none is used ("" when one is, or when llvmlite builds this machine's kernels)."""
    if jit.can_build() or not libraries:
        return ""
    target, why = machine_target()
    if target is None:
        reason = why
    elif target.name not in libraries:
        reason = (f"{where} holds host kernels for {', '.join(sorted(libraries))}, not {target.name} "
                  f"(compile it with --host-targets {target.name})")
    else:
        try:
            reason = jit.add_library(objcache.Library(_library_file(libraries[target.name].tobytes())))
        except CompileError as e:
            reason = str(e)
    if reason:
        warnings.warn(f"host kernels on numpy: {reason}", HostKernelWarning, stacklevel=3)
        return reason
    cpu.reselect()
    return ""


def known_target(name: str) -> bool:
    return name in TARGETS
