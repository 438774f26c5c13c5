"""GPU kernels as llvmlite IR: thread/block ids, shared memory, barriers, and one generator for two targets.

A kernel generator writes its body once against `GpuKernelBuilder` (the CPU
backend's `KernelBuilder` plus GPU primitives).  The builder emits that body
for one of two targets:

- "gpu": an `nvptx64-nvidia-cuda` module; ids are `llvm.nvvm.read.ptx.sreg.*`
  reads, barriers `llvm.nvvm.barrier0`, shared arrays `addrspace(3)` globals,
  the function is marked a kernel in `nvvm.annotations`;
- "host": the same body for the host CPU, where ids come from a per-thread
  array, shared arrays live in one per-block buffer and a barrier calls back
  into the emulator (`emulate.py`), so kernel logic is tested without a GPU.

Only these primitives differ between the two; loops, indexing and arithmetic
are the same IR.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llvmlite import ir

from vtakit.compiler.backends.cpu.irgen import I8, I32, I64, PTR, KernelBuilder, byte_size
from vtakit.compiler.backends.cuda.target import NVPTX_TRIPLE, compile_ptx, nvptx_data_layout
from vtakit.errors import CompileError
from vtakit.isa.arith import ceil_div, round_up

GPU = "gpu"
HOST = "host"
BARRIER_SYMBOL = "vtakit_emulated_barrier"
MAX_THREADS = 1024
MAX_GRID_YZ = 65535
MAX_GRID_X = 2**31 - 1
MAX_SHARED_BYTES = 48 * 1024  # static shared memory a kernel may declare
# index of each special register in the host target's per-thread id array
ID_SLOTS = {"tid": 0, "ntid": 3, "ctaid": 6, "nctaid": 9}
AXES = "xyz"


@dataclass(frozen=True)
class Launch:
    """Grid and block shape of one launch (static shared memory is declared in the kernel)."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def check(self, op: str) -> None:
        if min(self.grid + self.block) < 1 or self.threads > MAX_THREADS:
            raise CompileError(f"launch {self.grid} x {self.block} is not a valid CUDA launch", op=op)
        if self.grid[0] > MAX_GRID_X or max(self.grid[1:]) > MAX_GRID_YZ:
            raise CompileError(f"grid {self.grid} exceeds CUDA's limits", op=op)


def grid_1d(items: int, threads: int = 256, max_blocks: int = 8192) -> Launch:
    """A 1-D launch for a grid-stride loop over `items`: blocks of `threads`, at most `max_blocks` of them."""
    blocks = max(1, min(ceil_div(items, threads), max_blocks))
    return Launch((blocks, 1, 1), (threads, 1, 1))


class GpuKernelBuilder(KernelBuilder):
    """`KernelBuilder` for one GPU kernel, emitted for the GPU or for host emulation (see module doc)."""

    def __init__(self, name: str, pointers: Sequence[str], integers: Sequence[str], launch: Launch, mode: str):
        extra = ["__ids", "__shared"] if mode == HOST else []
        super().__init__(name, [*pointers, *extra], integers)
        self.mode = mode
        self.launch = launch
        self.shared_bytes = 0
        self.uses_barrier = False
        if mode == GPU:
            self.module.triple = NVPTX_TRIPLE
            self.module.data_layout = nvptx_data_layout()
            self.module.add_named_metadata("nvvm.annotations", [self.function, "kernel", ir.Constant(I32, 1)])
            self.module.add_named_metadata("nvvm.annotations",
                                           [self.function, "maxntidx", ir.Constant(I32, launch.threads)])
        else:
            for arg_name in extra:  # shared memory is written by every thread of the block: no noalias
                self.args[arg_name].attributes.discard("noalias")

    # -- special registers -------------------------------------------------
    def special(self, register: str, axis: str = "x") -> ir.Value:
        """tid / ntid / ctaid / nctaid along x, y or z, as i64."""
        if self.mode == GPU:
            fn = self.intrinsic(f"llvm.nvvm.read.ptx.sreg.{register}.{axis}", I32, [])
            value = self.b.call(fn, [])
        else:
            value = self.load(self["__ids"], ID_SLOTS[register] + AXES.index(axis), I32)
        return self.b.zext(value, I64)

    def thread(self, axis: str = "x") -> ir.Value:
        return self.special("tid", axis)

    def block(self, axis: str = "x") -> ir.Value:
        return self.special("ctaid", axis)

    def global_thread(self) -> ir.Value:
        """blockIdx.x * blockDim.x + threadIdx.x for 1-D launches (block size is a constant)."""
        return self.idx((self.block("x"), self.launch.block[0]), self.thread("x"))

    def grid_stride(self, items: int, name: str = "item"):
        """for (i = global thread; i < items; i += all threads): a 1-D grid-stride loop."""
        total = self.launch.blocks * self.launch.threads
        return self.loop(items, start=self.global_thread(), step=total, name=name)

    # -- block-level cooperation ------------------------------------------
    def barrier(self) -> None:
        """__syncthreads(): every thread of the block waits here; shared memory writes become visible."""
        self.uses_barrier = True
        if self.mode == GPU:
            self.b.call(self.intrinsic("llvm.nvvm.barrier0", ir.VoidType(), []), [])
        else:
            self.b.call(self.intrinsic(BARRIER_SYMBOL, ir.VoidType(), [PTR]), [self["__shared"]])

    def shared_array(self, elem: ir.Type, count: int, name: str) -> ir.Value:
        """A block-shared array of `count` elements (16-byte aligned); returns its base pointer."""
        offset = round_up(self.shared_bytes, 16)
        self.shared_bytes = offset + byte_size(elem) * count
        if self.shared_bytes > MAX_SHARED_BYTES:
            raise CompileError(f"kernel {self.name} needs {self.shared_bytes} bytes of shared memory", op=self.name)
        if self.mode == GPU:
            array = ir.GlobalVariable(self.module, ir.ArrayType(elem, count), name=name, addrspace=3)
            array.linkage = "internal"
            array.align = 16
            array.initializer = ir.Constant(ir.ArrayType(elem, count), ir.Undefined)
            return array.gep([self.i64(0), self.i64(0)])  # a pointer to the first element, in addrspace(3)
        return self.b.gep(self["__shared"], [self.i64(offset)], inbounds=True, source_etype=I8)

    def select_index(self, valid: ir.Value, index: ir.Value) -> ir.Value:
        """`index` where valid, else 0: an address that is always safe to load from (then discard)."""
        return self.b.select(valid, index, self.i64(0))

    # -- finishing ------------------------------------------------------------
    def finish(self) -> tuple[str, str, list]:
        if self.mode == HOST:
            self.b.ret_void()
            self._emit_grid_wrapper()
            return str(self.module), self.name, self.argtypes
        return super().finish()

    def _emit_grid_wrapper(self) -> None:
        """`name__grid(same args)`: runs every thread of the launch in turn (valid without barriers).

        The kernel stays a call (noinline): inlined, LLVM vectorises the loop over threads, and its
        masked int8 store of the last threads' results is compiled as a 4-byte store, past the end of
        the output (llvmlite's LLVM, AVX-512; found by the quantize sweep, 17 elements)."""
        self.function.attributes.add("noinline")
        fn = ir.Function(self.module, self.function.function_type, name=f"{self.name}__grid")
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        ids = fn.args[list(self.args).index("__ids")]
        block_ids, thread_ids = self.launch.grid, self.launch.block
        for axis in range(3):
            for register, extent in (("ntid", thread_ids[axis]), ("nctaid", block_ids[axis])):
                slot = builder.gep(ids, [ir.Constant(I64, ID_SLOTS[register] + axis)], source_etype=I32)
                builder.store(ir.Constant(I32, extent), slot)
        # loops over ctaid z, y, x then tid z, y, x, innermost last
        extents = [("ctaid", 2, block_ids[2]), ("ctaid", 1, block_ids[1]), ("ctaid", 0, block_ids[0]),
                   ("tid", 2, thread_ids[2]), ("tid", 1, thread_ids[1]), ("tid", 0, thread_ids[0])]
        _emit_nest(fn, builder, ids, extents, lambda b: b.call(self.function, list(fn.args)))
        builder.ret_void()
        fn.attributes.add("nounwind")


def _emit_nest(fn: ir.Function, builder: ir.IRBuilder, ids: ir.Value, extents: list,
               body: Callable[[ir.IRBuilder], Any]) -> None:
    """Counted i32 loops that store each counter in the id array before running `body`."""
    if not extents:
        body(builder)
        return
    register, axis, extent = extents[0]
    preheader = builder.block
    head = fn.append_basic_block(f"{register}{axis}.head")
    loop_body = fn.append_basic_block(f"{register}{axis}.body")
    done = fn.append_basic_block(f"{register}{axis}.done")
    builder.branch(head)
    builder.position_at_end(head)
    counter = builder.phi(I32)
    counter.add_incoming(ir.Constant(I32, 0), preheader)
    builder.cbranch(builder.icmp_signed("<", counter, ir.Constant(I32, extent)), loop_body, done)
    builder.position_at_end(loop_body)
    builder.store(counter, builder.gep(ids, [ir.Constant(I64, ID_SLOTS[register] + axis)], source_etype=I32))
    _emit_nest(fn, builder, ids, extents[1:], body)
    counter.add_incoming(builder.add(counter, ir.Constant(I32, 1)), builder.block)
    builder.branch(head)
    builder.position_at_end(done)


@dataclass(frozen=True)
class Built:
    """One kernel emitted for one target: IR text plus what the launcher must know."""

    ir_text: str
    uses_barrier: bool
    shared_bytes: int


@dataclass(frozen=True)
class GpuKernel:
    """A kernel specialised on `spec` (a frozen dataclass): arguments, launch and its body generator."""

    name: str
    spec: Any
    launch: Launch
    pointers: tuple[str, ...]
    integers: tuple[str, ...]
    emit: Callable[[GpuKernelBuilder, Any], None] = field(compare=False, hash=False, repr=False)

    @property
    def key(self) -> tuple:
        return (self.name, self.spec, self.launch)

    def built(self, mode: str) -> Built:
        """The IR for `mode` ("gpu" or "host"), generated once per process."""
        cache_key = (self.key, mode)
        with _lock:
            found = _built.get(cache_key)
        if found is None:
            builder = GpuKernelBuilder(self.name, self.pointers, self.integers, self.launch, mode)
            self.emit(builder, self.spec)
            ir_text, _, _ = builder.finish()
            found = Built(ir_text, builder.uses_barrier, builder.shared_bytes)
            with _lock:
                _built[cache_key] = found
        return found

    def ptx(self, arch: str) -> str:
        return compile_ptx(self.built(GPU).ir_text, arch, self.name)


_built: dict[tuple, Built] = {}
_lock = threading.Lock()


def make_kernel(name: str, spec: Any, launch: Launch, pointers: Sequence[str], integers: Sequence[str],
                emit: Callable[[GpuKernelBuilder, Any], None]) -> GpuKernel:
    """A GpuKernel with its launch checked against CUDA's limits."""
    launch.check(name)
    return GpuKernel(name, spec, launch, tuple(pointers), tuple(integers), emit)
