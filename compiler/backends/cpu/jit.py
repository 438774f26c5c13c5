"""LLVM set-up, optimisation, MCJIT compilation and the in-process kernel cache.

Every kernel is a `void name(ptr noalias ..., i64 ...)` function in its own
module, specialised on shapes and parameters; `KernelKey` names it.  A kernel is
compiled once per key and kept (with its execution engine) until
`clear_cache()`, so repeated calls with the same shapes cost one ctypes call.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import llvmlite.binding as llvm

from vtakit.errors import CompileError


@dataclass(frozen=True)
class KernelKey:
    """What a compiled kernel is specialised on: its family and every parameter."""

    family: str
    params: tuple[Any, ...]


@dataclass(frozen=True)
class CacheInfo:
    """Number of kernels compiled since the last clear, and the seconds spent."""

    kernels: int
    compile_seconds: float


@dataclass(frozen=True)
class HostTarget:
    """The host CPU as LLVM sees it, and the vector shape kernels are built for."""

    cpu: str
    features: str
    vector_bits: int
    vector_registers: int

    def lanes(self, elem_bits: int) -> int:
        return self.vector_bits // elem_bits


class _Llvm:
    """Initialised-once LLVM state: the host target machine."""

    def __init__(self) -> None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        cpu = llvm.get_host_cpu_name()
        feature_map = llvm.get_host_cpu_features()
        has = {name for name, on in feature_map.items() if on}
        features = feature_map.flatten()
        if "avx512f" in has:
            # Explicit 512-bit vectors only map to zmm registers when the
            # subtarget does not prefer 256-bit ones (Ice Lake and later do).
            features += ",-prefer-256-bit"
            vector_bits, registers = 512, 32
        elif "avx2" in has or "avx" in has:
            vector_bits, registers = 256, 16
        else:
            vector_bits, registers = 128, 16
        self.host = HostTarget(cpu, features, vector_bits, registers)
        self.target_machine = self.new_target_machine()
        self.triple = llvm.get_process_triple()
        self.data_layout = str(self.target_machine.target_data)

    def new_target_machine(self) -> llvm.TargetMachine:
        """A fresh host target machine (an MCJIT engine takes ownership of the one it gets)."""
        target = llvm.Target.from_default_triple()
        return target.create_target_machine(cpu=self.host.cpu, features=self.host.features, opt=3,
                                            reloc="default", codemodel="jitdefault")

    def optimise(self, module: llvm.ModuleRef) -> None:
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        tuning.loop_unrolling = True
        tuning.loop_interleaving = True
        builder = llvm.create_pass_builder(self.target_machine, tuning)
        builder.getModulePassManager().run(module, builder)


@lru_cache(maxsize=1)
def _llvm() -> _Llvm:
    return _Llvm()


def host_target() -> HostTarget:
    return _llvm().host


def module_header() -> tuple[str, str]:
    """(triple, data layout) to stamp on generated modules."""
    state = _llvm()
    return state.triple, state.data_layout


class CompiledKernel:
    """A JIT-compiled function and the engine that owns its machine code."""

    def __init__(self, engine: llvm.ExecutionEngine, function: Callable[..., None], seconds: float):
        self._engine = engine  # keeps the code alive
        self.function = function
        self.compile_seconds = seconds

    def __call__(self, *args: Any) -> None:
        self.function(*args)


_cache: dict[KernelKey, CompiledKernel] = {}
_compile_seconds = 0.0
_lock = threading.Lock()


def compile_ir(ir_text: str, name: str, argtypes: list[Any], op: str) -> CompiledKernel:
    """Parse, optimise (O3) and JIT one module; `name` is the function to bind."""
    state = _llvm()
    start = time.perf_counter()
    try:
        module = llvm.parse_assembly(ir_text)
        module.verify()
    except RuntimeError as exc:  # a generator bug, not a user error, but say where
        raise CompileError(f"generated LLVM IR does not verify: {str(exc).splitlines()[0]}", op=op) from exc
    state.optimise(module)
    engine = llvm.create_mcjit_compiler(module, state.new_target_machine())
    engine.finalize_object()
    address = engine.get_function_address(name)
    function = ctypes.CFUNCTYPE(None, *argtypes)(address)
    return CompiledKernel(engine, function, time.perf_counter() - start)


def get_kernel(key: KernelKey, build: Callable[[], tuple[str, str, list[Any]]], op: str) -> CompiledKernel:
    """The cached kernel for `key`, building (IR text, function name, ctypes argtypes) on a miss."""
    global _compile_seconds
    with _lock:
        kernel = _cache.get(key)
        if kernel is None:
            ir_text, name, argtypes = build()
            kernel = compile_ir(ir_text, name, argtypes, op)
            _cache[key] = kernel
            _compile_seconds += kernel.compile_seconds
        return kernel


_plans: dict[tuple, Any] = {}


def cached_plan(signature: tuple, make: Callable[[], Any]) -> Any:
    """Memo in front of `get_kernel` keyed by what a call can see cheaply (shapes, dtype chars, params).

    Building a KernelKey (broadcast strides, collapsed shapes) costs more than a
    small kernel runs; a plan caches its result per call signature.  Plans hold
    kernels, so `clear_cache` drops them too.
    """
    plan = _plans.get(signature)
    if plan is None:
        plan = make()
        with _lock:
            _plans[signature] = plan
    return plan


def cache_info() -> CacheInfo:
    """How many kernels are compiled and how long compiling them took."""
    with _lock:
        return CacheInfo(len(_cache), _compile_seconds)


def clear_cache() -> None:
    """Drop every compiled kernel (the next call of each shape compiles again)."""
    global _compile_seconds
    with _lock:
        _cache.clear()
        _plans.clear()
        _compile_seconds = 0.0
