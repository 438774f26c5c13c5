"""LLVM IR -> PTX for NVIDIA GPUs through llvmlite's NVPTX backend, cached by a hash of IR and arch.

PTX is the portable form: the driver JIT-compiles it for the GPU it runs on, so
PTX for sm_80 runs on Ampere, Hopper and later.  `ptxas` (when it is on the
PATH) assembles PTX ahead of time; the tests use it to check what we emit
without a GPU.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import llvmlite.binding as llvm

from vtakit.errors import CompileError

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_80"


@dataclass(frozen=True)
class GpuTarget:
    """Which GPU architecture PTX is generated for (`sm_XY`); PTX for an older arch runs on newer GPUs."""

    arch: str = DEFAULT_ARCH

    def __post_init__(self) -> None:
        digits = self.arch[3:].rstrip("af")
        if not self.arch.startswith("sm_") or not digits.isdigit() or int(digits) < 50:
            raise CompileError(f"GPU arch must look like sm_80 (sm_50 or newer), got {self.arch!r}")

    @property
    def capability(self) -> tuple[int, int]:
        digits = self.arch[3:].rstrip("af")
        return int(digits[:-1]), int(digits[-1])


@lru_cache(maxsize=None)
def _target_machine(arch: str) -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(NVPTX_TRIPLE)
    return target.create_target_machine(cpu=arch, opt=3)


def nvptx_data_layout() -> str:
    """The data layout stamped on GPU modules (the same for every sm)."""
    return str(_target_machine(DEFAULT_ARCH).target_data)


_ptx_cache: dict[str, str] = {}
_lock = threading.Lock()


def ptx_key(ir_text: str, arch: str) -> str:
    """The cache key (and the module's record) of one kernel's PTX: sha256 of IR and arch."""
    return hashlib.sha256(f"{arch}\n{ir_text}".encode()).hexdigest()


def compile_ptx(ir_text: str, arch: str, op: str) -> str:
    """PTX for one NVPTX module (optimised at O3), from the cache when this IR was seen for `arch`."""
    key = ptx_key(ir_text, arch)
    with _lock:
        cached = _ptx_cache.get(key)
    if cached is not None:
        return cached
    machine = _target_machine(GpuTarget(arch).arch)
    try:
        module = llvm.parse_assembly(ir_text)
        module.verify()
    except RuntimeError as exc:  # a generator bug, not a user error, but say where
        raise CompileError(f"generated GPU IR does not verify: {str(exc).splitlines()[0]}", op=op) from exc
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    ptx = machine.emit_assembly(module)
    with _lock:
        _ptx_cache[key] = ptx
    return ptx


def ptx_cache_size() -> int:
    with _lock:
        return len(_ptx_cache)


def find_ptxas() -> str | None:
    """Path of NVIDIA's PTX assembler, or None when the CUDA toolkit is not on the PATH."""
    return shutil.which("ptxas")


@dataclass(frozen=True)
class Assembled:
    """What ptxas said about one kernel: registers per thread, static shared memory, spills."""

    arch: str
    registers: int
    shared_bytes: int
    spill_bytes: int
    log: str


def assemble(ptx: str, arch: str) -> Assembled:
    """Assemble PTX with ptxas for `arch` (CompileError with ptxas's first error line on failure)."""
    ptxas = find_ptxas()
    if ptxas is None:
        raise CompileError("ptxas is not on the PATH (install the CUDA toolkit to assemble PTX)", op="ptxas")
    with tempfile.TemporaryDirectory(prefix="vtakit-ptx-") as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run([ptxas, "-v", f"-arch={arch}", str(source), "-o", str(Path(folder) / "kernel.cubin")],
                              capture_output=True, text=True, timeout=120)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        first = next((line for line in log.splitlines() if "error" in line.lower()), log.strip()[:200])
        raise CompileError(f"ptxas -arch={arch} rejected the PTX: {first}", op="ptxas")
    return Assembled(arch, _number_before(log, "registers"), _number_before(log, "bytes smem"),
                     _number_before(log, "bytes spill stores"), log)


def _number_before(log: str, label: str) -> int:
    """The integer just before `label` in ptxas -v output (0 when absent)."""
    for line in log.splitlines():
        at = line.find(label)
        if at > 0:
            words = line[:at].replace(",", " ").split()
            if words and words[-1].isdigit():
                return int(words[-1])
    return 0
