"""LLVM through llvmlite: this machine's CPU, O3, MCJIT, and native objects for any named target.

Only the PC imports this module (it needs llvmlite >= 0.45); `jit.py` goes without it on a board, where
kernels come prebuilt from the module (aot.py).  Objects for shared libraries are position-independent;
each kernel's function is renamed to its key's symbol, so the kernels of a whole module link into one
library next to an index (`INDEX_SYMBOL`, JSON) that says what each symbol takes and which CPU it is for.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from vtakit.compiler.backends.cpu.objcache import INDEX_SYMBOL, Kernel
from vtakit.compiler.backends.cpu.targets import HostTarget, NamedTarget
from vtakit.errors import CompileError

if tuple(int(part) for part in llvmlite.__version__.split(".")[:2]) < (0, 45):  # the emitted IR needs 0.45
    raise ImportError(f"llvmlite {llvmlite.__version__} is older than 0.45, which the kernels need", name="llvmlite")


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
        self.triple = llvm.get_process_triple()
        self.target_machine = self.new_target_machine()
        self.data_layout = str(self.target_machine.target_data)

    def new_target_machine(self, reloc: str = "default", codemodel: str = "jitdefault") -> llvm.TargetMachine:
        """A fresh host target machine (an MCJIT engine takes ownership of the one it gets)."""
        target = llvm.Target.from_default_triple()
        return target.create_target_machine(cpu=self.host.cpu, features=self.host.features, opt=3,
                                            reloc=reloc, codemodel=codemodel)

    def optimise(self, module: llvm.ModuleRef, machine: llvm.TargetMachine | None = None) -> None:
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        tuning.loop_unrolling = True
        tuning.loop_interleaving = True
        builder = llvm.create_pass_builder(machine or self.target_machine, tuning)
        builder.getModulePassManager().run(module, builder)


@lru_cache(maxsize=1)
def _llvm() -> _Llvm:
    return _Llvm()


def host_target() -> HostTarget:
    return _llvm().host


def host_identity() -> str:
    """What this machine's kernels depend on besides their key: triple, CPU, features, llvmlite."""
    state = _llvm()
    return f"{state.triple}|{state.host.cpu}|{state.host.features}|llvmlite {llvmlite.__version__}"


@lru_cache(maxsize=8)
def _machine(target: NamedTarget | None) -> llvm.TargetMachine:
    """A target machine for position-independent objects: this machine's CPU, or a named target's."""
    if target is None:
        return _llvm().new_target_machine(reloc="pic", codemodel="default")
    _llvm()  # every target initialised
    return llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.host.cpu, features=target.host.features, opt=3, reloc="pic", codemodel="default")


def module_header(target: NamedTarget | None = None) -> tuple[str, str]:
    """(triple, data layout) to stamp on generated modules, for this machine or a named target."""
    if target is None:
        state = _llvm()
        return state.triple, state.data_layout
    return target.triple, str(_machine(target).target_data)


def _parsed(ir_text: str, op: str) -> llvm.ModuleRef:
    try:
        module = llvm.parse_assembly(ir_text)
        module.verify()
    except RuntimeError as exc:  # a generator bug, not a user error, but say where
        raise CompileError(f"generated LLVM IR does not verify: {str(exc).splitlines()[0]}", op=op) from exc
    return module


def compile_ir(ir_text: str, name: str, argtypes: list[Any], op: str) -> Kernel:
    """Parse, optimise (O3) and JIT one module; `name` is the function to bind."""
    state = _llvm()
    start = time.perf_counter()
    module = _parsed(ir_text, op)
    state.optimise(module)
    engine = llvm.create_mcjit_compiler(module, state.new_target_machine())
    engine.finalize_object()
    address = engine.get_function_address(name)
    function = ctypes.CFUNCTYPE(None, *argtypes)(address)
    return Kernel(engine, function, time.perf_counter() - start)


def argument_codes(argtypes: list[Any]) -> str:
    """ctypes argument types as a string ("p" a pointer, "q" an int64) for a library's index."""
    codes = {ctypes.c_void_p: "p", ctypes.c_int64: "q"}
    if any(t not in codes for t in argtypes):
        raise CompileError(f"a kernel argument type outside pointers and int64: {argtypes}")
    return "".join(codes[t] for t in argtypes)


def emit_object(kernels: Mapping[str, tuple[str, str, str, str]], target: NamedTarget | None,
                host: HostTarget, source: str) -> bytes:
    """One position-independent object holding every kernel (symbol -> (IR text, function name, argument
    codes, op)), each function renamed to its symbol, and the index; for this machine or a named target."""
    machine = _machine(target)
    state = _llvm()
    combined: llvm.ModuleRef | None = None
    for symbol, (ir_text, name, _, op) in kernels.items():
        module = _parsed(ir_text, op)
        module.get_function(name).name = symbol
        state.optimise(module, machine)
        if combined is None:
            combined = module
        else:
            combined.link_in(module)
    index = json.dumps(dict(host=dataclasses.asdict(host), source=source,
                            kernels={symbol: codes for symbol, (_, _, codes, _) in kernels.items()}))
    data = index.encode() + b"\0"
    triple, layout = module_header(target)
    escaped = "".join(f"\\{byte:02X}" for byte in data)
    table = _parsed(f'target triple = "{triple}"\ntarget datalayout = "{layout}"\n'
                    f'@{INDEX_SYMBOL} = constant [{len(data)} x i8] c"{escaped}"\n', "index")
    if combined is None:
        combined = table
    else:
        combined.link_in(table)
    return machine.emit_object(combined)
