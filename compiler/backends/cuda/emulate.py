"""Run GPU kernels on the host CPU: the same generated IR, compiled for the host, so kernel logic is
testable without a GPU.

Each kernel's body is emitted a second time for the host (`kernel.py`, mode
"host"): ids are read from a per-thread array, shared arrays sit in one buffer
per block, `__syncthreads()` calls back into Python.

- Kernels without barriers: every thread is independent, so a generated
  wrapper runs all threads of the launch one after another in compiled code.
- Kernels with barriers: one block at a time, every thread of the block on its
  own OS thread, with a barrier that releases when all live threads of the block
  have arrived (threads that returned count as arrived, as on the GPU).  This is
  sound for any interleaving the kernel is correct under; it is slow (hundreds
  of threads per block), so it suits test-sized shapes.

What it cannot show: NVPTX code generation itself (ptxas checks that), memory
coalescing and speed, and races between blocks (blocks run one at a time).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from vtakit.compiler.backends.cpu.jit import KernelKey, get_kernel
from vtakit.compiler.backends.cuda.device_array import Argument, Buffer, DeviceArray
from vtakit.compiler.backends.cuda.kernel import BARRIER_SYMBOL, HOST, ID_SLOTS, GpuKernel
from vtakit.errors import DeviceError

_local = threading.local()


class _BlockBarrier:
    """__syncthreads for emulated threads: releases when every live thread of the block has arrived."""

    def __init__(self, parties: int):
        self._condition = threading.Condition()
        self.reset(parties)

    def reset(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.generation = 0

    def wait(self) -> None:
        with self._condition:
            generation = self.generation
            self.arrived += 1
            if self.arrived >= self.parties:
                self._release()
                return
            while generation == self.generation:
                self._condition.wait()

    def leave(self) -> None:
        """A thread returned from the kernel: the others no longer wait for it."""
        with self._condition:
            self.parties -= 1
            if self.arrived and self.arrived >= self.parties:
                self._release()

    def _release(self) -> None:
        self.arrived = 0
        self.generation += 1
        self._condition.notify_all()


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _barrier_callback(_shared: int) -> None:
    _local.barrier.wait()


llvm.add_symbol(BARRIER_SYMBOL, ctypes.cast(_barrier_callback, ctypes.c_void_p).value)


GUARD_BYTES = 64


def canary(address: int, count: int) -> np.ndarray:
    """The guard bytes for `count` addresses from `address`: a hash of each address (splitmix64's
    finaliser; odd, so never 0), so a kernel that copies one buffer's guard into another's still changes
    it (each byte equal by chance with probability 1/128)."""
    z = np.arange(address, address + count, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z & np.uint64(0xFF)).astype(np.uint8) | 1


def guarded(nbytes: int) -> np.ndarray:
    """`nbytes` of 0xFF (not zeros, so an output a kernel misses shows up), 64-byte aligned, between at least
    GUARD_BYTES canary bytes on each side; a view whose `.base` is the whole allocation."""
    raw = np.empty(nbytes + 2 * GUARD_BYTES + 64, np.uint8)
    start = GUARD_BYTES + (-(raw.ctypes.data + GUARD_BYTES) % 64)
    raw[:] = canary(raw.ctypes.data, raw.size)
    raw[start:start + nbytes] = 0xFF
    return raw[start:start + nbytes]


def guard_damage(storage: np.ndarray) -> str | None:
    """Which canary bytes around `guarded` storage were overwritten ("bytes -3..-1 before it"), or None."""
    raw = storage.base
    start = storage.ctypes.data - raw.ctypes.data
    end = start + storage.size
    before = np.flatnonzero(raw[:start] != canary(raw.ctypes.data, start)) - start
    after = np.flatnonzero(raw[end:] != canary(raw.ctypes.data + end, raw.size - end))
    sides = [f"bytes {side.min()}..{side.max()} {where} it"
             for side, where in ((before, "before"), (after, "after")) if side.size]
    return " and ".join(sides) or None


class Emulator:
    """A GpuBackend whose memory is host memory and whose launches run the host form of each kernel."""

    label = "emulator"
    arch = "host"

    def __init__(self) -> None:
        self.launches = 0
        self._buffers: weakref.WeakSet[Buffer] = weakref.WeakSet()  # for check_guards

    # -- memory ----------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: Any) -> DeviceArray:
        dtype = np.dtype(dtype)
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        storage = guarded(nbytes)
        buffer = Buffer(self, storage.ctypes.data, nbytes, storage)
        self._buffers.add(buffer)
        return DeviceArray(tuple(int(s) for s in shape), dtype, buffer)

    def check_guards(self) -> None:
        """Raise DeviceError if a write reached the guard bytes around any live array of this emulator."""
        for buffer in list(self._buffers):
            damage = guard_damage(buffer.storage)
            if damage:
                raise DeviceError(f"emulated memory corrupted: {damage} of a {buffer.nbytes}-byte buffer")

    def upload(self, array: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(array)
        out = self.empty(np.shape(array), host.dtype)  # ascontiguousarray makes a 0-D array 1-D
        out.buffer.storage[:host.nbytes] = host.reshape(-1).view(np.uint8)
        return out

    def download(self, array: DeviceArray) -> np.ndarray:
        raw = array.buffer.storage[:array.nbytes]
        return raw.view(array.dtype).reshape(array.shape).copy()

    def synchronize(self) -> None:
        """Launches finish before they return."""

    # -- launches ----------------------------------------------------------------
    def launch(self, kernel: GpuKernel, args: Sequence[Argument]) -> None:
        built = kernel.built(HOST)
        entry = kernel.name if built.uses_barrier else f"{kernel.name}__grid"
        argtypes = ([ctypes.c_void_p] * (len(kernel.pointers) + 2)) + [ctypes.c_int64] * len(kernel.integers)
        compiled = get_kernel(KernelKey("cuda-emulated", (kernel.key, entry)),
                              lambda: (built.ir_text, entry, argtypes), kernel.name)
        if len(args) != len(kernel.pointers) + len(kernel.integers):
            raise DeviceError(f"kernel {kernel.name} takes {len(kernel.pointers) + len(kernel.integers)} arguments, "
                              f"got {len(args)}")
        pointers = [self._address(a, kernel.name) for a in args[:len(kernel.pointers)]]
        integers = [int(a) for a in args[len(kernel.pointers):]]
        shared = guarded(max(16, built.shared_bytes))  # 0xFF: uninitialised, as on the GPU
        self.launches += 1
        if not built.uses_barrier:
            ids = (ctypes.c_int32 * 12)()
            compiled(*pointers, ctypes.addressof(ids), shared.ctypes.data, *integers)
        else:
            self._run_blocks(compiled, kernel, pointers, integers, shared)
        # a launch can only reach its arguments and shared memory: check their guards before anything else runs
        reachable = [(f"argument {n}", a.buffer.storage) for n, a in zip(kernel.pointers, args)]
        for name, storage in [*reachable, ("shared memory", shared)]:
            damage = guard_damage(storage)
            if damage:
                raise DeviceError(f"kernel {kernel.name} wrote outside its {name}: {damage}")

    def _address(self, value: Argument, name: str) -> int:
        if not isinstance(value, DeviceArray) or value.backend is not self:
            raise DeviceError(f"kernel {name}: pointer arguments must be arrays of this emulator, got {value!r}")
        return value.buffer.address

    @staticmethod
    def _run_blocks(compiled, kernel: GpuKernel, pointers: list[int], integers: list[int],
                    shared: np.ndarray) -> None:
        launch = kernel.launch
        threads = launch.threads
        barrier = _BlockBarrier(threads)
        fence = threading.Barrier(threads, action=lambda: barrier.reset(threads))
        blocks = list(itertools.product(range(launch.grid[2]), range(launch.grid[1]), range(launch.grid[0])))
        thread_ids = list(itertools.product(range(launch.block[2]), range(launch.block[1]), range(launch.block[0])))
        failures: list[BaseException] = []

        def run(thread: int) -> None:
            _local.barrier = barrier
            ids = (ctypes.c_int32 * 12)()
            tz, ty, tx = thread_ids[thread]
            ids[ID_SLOTS["tid"]:ID_SLOTS["tid"] + 3] = [tx, ty, tz]
            ids[ID_SLOTS["ntid"]:ID_SLOTS["ntid"] + 3] = list(launch.block)
            ids[ID_SLOTS["nctaid"]:ID_SLOTS["nctaid"] + 3] = list(launch.grid)
            try:
                for bz, by, bx in blocks:
                    ids[ID_SLOTS["ctaid"]:ID_SLOTS["ctaid"] + 3] = [bx, by, bz]
                    compiled(*pointers, ctypes.addressof(ids), shared.ctypes.data, *integers)
                    barrier.leave()
                    fence.wait()
            except BaseException as exc:  # a broken fence or a failure in one thread ends the launch
                failures.append(exc)
                fence.abort()

        workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if failures:
            raise DeviceError(f"emulated kernel {kernel.name} failed: {failures[0]!r}")
