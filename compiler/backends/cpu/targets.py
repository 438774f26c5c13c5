"""The CPUs host kernels are built for: this machine, and the named targets a module can ship kernels for.

A kernel is specialised on the vector shape of the CPU it runs on (`HostTarget`: the GEMM tile, the dense
block, the transpose block all follow from it), so a kernel built for a board is planned with the board's
vector shape.  Nothing here needs llvmlite: a board's runtime reads the same table to pick the library of a
module that matches its machine.
"""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vtakit.errors import ConfigError


@dataclass(frozen=True)
class HostTarget:
    """The CPU as LLVM sees it, and the vector shape kernels are built for."""

    cpu: str
    features: str
    vector_bits: int
    vector_registers: int

    def lanes(self, elem_bits: int) -> int:
        return self.vector_bits // elem_bits


@dataclass(frozen=True)
class NamedTarget:
    """A CPU family a module can carry prebuilt host kernels for (`vtakit compile --host-targets`)."""

    name: str
    triple: str            # LLVM's target triple
    zig_target: str        # `python -m ziglang cc -target ...` (links against the target's libc stubs)
    zig_cpu: str
    machines: tuple[str, ...]   # platform.machine() values that run it
    needs_flags: tuple[str, ...]  # /proc/cpuinfo flags the code uses (x86: AVX2, FMA)
    host: HostTarget
    boards: str


TARGETS: dict[str, NamedTarget] = {t.name: t for t in (
    # Zynq-7000 (PYNQ-Z1/Z2): Cortex-A9, ARMv7-A with NEON and VFPv3, hard-float ABI; 16 quad registers
    NamedTarget("armv7", "armv7-unknown-linux-gnueabihf", "arm-linux-gnueabihf", "cortex_a9",
                ("armv7l", "armv7"), (), HostTarget("cortex-a9", "+neon,+vfp3", 128, 16),
                "Zynq-7000 (PYNQ-Z1, PYNQ-Z2)"),
    # Zynq UltraScale+ (Ultra96, ZCU104): Cortex-A53, AArch64 with Advanced SIMD; 32 vector registers
    NamedTarget("aarch64", "aarch64-unknown-linux-gnu", "aarch64-linux-gnu", "cortex_a53",
                ("aarch64", "arm64"), (), HostTarget("cortex-a53", "+neon", 128, 32),
                "Zynq UltraScale+ (Ultra96, ZCU104)"),
    # x86-64-v3 (Haswell and later: AVX2 and FMA); 16 ymm registers
    NamedTarget("x86_64", "x86_64-unknown-linux-gnu", "x86_64-linux-gnu", "x86_64_v3",
                ("x86_64", "amd64"), ("avx2", "fma"), HostTarget("x86-64-v3", "", 256, 16),
                "x86-64 PCs with AVX2 (2013 and later)"),
)}


def named_targets(names) -> list[NamedTarget]:
    """The targets named in `names` (a comma-separated string or a sequence), each once, in order."""
    items = names.split(",") if isinstance(names, str) else list(names)
    chosen: list[NamedTarget] = []
    for item in items:
        name = str(item).strip()
        if name not in TARGETS:
            raise ConfigError(f"unknown host target {name[:40]!r}; the targets are {', '.join(TARGETS)}")
        if TARGETS[name] not in chosen:
            chosen.append(TARGETS[name])
    return chosen


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def machine_target() -> tuple[NamedTarget | None, str]:
    """The named target this machine runs, or None and why not."""
    machine = platform.machine().lower()
    for target in TARGETS.values():
        if machine in target.machines:
            missing = [f for f in target.needs_flags if f not in _cpu_flags()]
            if missing:
                return None, f"this {machine} CPU lacks {', '.join(missing)}, which the {target.name} kernels use"
            return target, ""
    return None, f"no host kernels are built for a {machine or 'unknown'} machine"


@lru_cache(maxsize=1)
def generator_hash() -> str:
    """sha256 of the kernel generators' sources (cpu/ and host/): a kernel built by other sources may take
    other arguments, so libraries and cached objects are only used by the sources that built them."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for folder in (here, here.parent / "host"):
        for path in sorted(folder.glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def cache_root() -> Path:
    """The folder vtakit caches builds in: $VTAKIT_CACHE, else ~/.cache/vtakit (as hw/build.py)."""
    root = os.environ.get("VTAKIT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "vtakit"
