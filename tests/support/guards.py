"""Guard bytes around every array a host kernel touches, so an out-of-bounds write fails a test (issue 13).

`guarded_call(kernel, *args)` copies the array arguments into guarded storage,
runs the kernel with `compiler.backends.cpu.buffers` switched to a `GuardedHeap` (so its
outputs and scratch buffers are guarded too), then checks every canary and
that the inputs are unchanged.  A guarded array sits inside a larger
allocation: at least GUARD_BYTES canary bytes before and after it (the
emulator's: a hash of each byte's address, never 0, so copying one buffer's
guard into another's is caught too), its own bytes poisoned with POISON so
that an output the kernel never writes shows up as a wrong value, not a lucky 0.

Writes further than GUARD_BYTES from a buffer are not caught by the canaries;
they usually land in another guarded buffer (all live ones are checked) or
crash the allocator, as in the issue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vtakit.compiler.backends.cpu import buffers
from vtakit.compiler.backends.cuda.emulate import canary

GUARD_BYTES = 64
POISON = 0xCD  # int8 -51, int32 -842150451, float32 -4.3e8: implausible kernel results


class GuardError(AssertionError):
    """A kernel wrote outside a buffer or modified an input (an AssertionError, so pytest reports it as one)."""


@dataclass
class Guarded:
    """One allocation: `raw` holds canaries, then the array's `nbytes` at `start`, then canaries."""

    label: str
    raw: np.ndarray
    start: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.start + self.nbytes

    def damage(self) -> str | None:
        """Which canary bytes were overwritten, relative to the array ("bytes -3..-1 before it"), or None."""
        address = self.raw.ctypes.data
        before = np.flatnonzero(self.raw[:self.start] != canary(address, self.start)) - self.start
        after = np.flatnonzero(self.raw[self.end:] != canary(address + self.end, self.raw.size - self.end))
        sides = [f"bytes {side.min()}..{side.max()} {where} it"
                 for side, where in ((before, "before"), (after, "after")) if side.size]
        return f"{self.label}: " + " and ".join(sides) if sides else None


class GuardedHeap:
    """An allocator for `buffers.use_allocator` that keeps every array it hands out, with its guards."""

    def __init__(self) -> None:
        self.blocks: list[Guarded] = []

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, label: str | None = None) -> np.ndarray:
        """A poisoned C-contiguous array between canaries (the `buffers.Allocator` signature)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw = np.empty(nbytes + 2 * GUARD_BYTES + 64, np.uint8)
        start = GUARD_BYTES + (-(raw.ctypes.data + GUARD_BYTES) % 64)  # 64-byte aligned, like a real heap block
        raw[:] = canary(raw.ctypes.data, raw.size)
        raw[start:start + nbytes] = POISON
        self.blocks.append(Guarded(label or f"allocation {len(self.blocks)} {shape} {dtype.name}", raw, start, nbytes))
        return raw[start:start + nbytes].view(dtype).reshape(shape)

    def adopt(self, array: np.ndarray, label: str) -> np.ndarray:
        """A guarded copy of `array` (for kernel inputs)."""
        copy = self.empty(array.shape, array.dtype, f"input {label} {array.shape} {array.dtype.name}")
        copy[...] = array
        return copy

    def damage(self) -> list[str]:
        return [found for block in self.blocks if (found := block.damage())]

    def check(self, what: str = "kernel") -> None:
        """Raise GuardError naming every damaged guard."""
        damage = self.damage()
        if damage:
            raise GuardError(f"{what} wrote outside its buffers: " + "; ".join(damage))

    def owns(self, array: np.ndarray) -> bool:
        """Whether `array`'s memory lies inside one guarded allocation (it came from this heap)."""
        low = array.ctypes.data
        high = low + array.nbytes
        return any(block.raw.ctypes.data + block.start <= low and high <= block.raw.ctypes.data + block.end
                   for block in self.blocks)


def _adopt_all(heap: GuardedHeap, value: Any, label: str) -> Any:
    """Arrays (also inside lists and tuples, e.g. concat's operands) replaced by guarded copies."""
    if isinstance(value, np.ndarray):
        return heap.adopt(value, label)
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        return type(value)(_adopt_all(heap, v, f"{label}[{k}]") for k, v in enumerate(value))
    return value


def guarded_call(kernel: Callable[..., np.ndarray], /, *args: Any, **kwargs: Any) -> np.ndarray:
    """kernel(*args, **kwargs) on guarded inputs and allocations; raises GuardError on a stray write, a
    changed input, or a result not allocated through `compiler.backends.cpu.buffers`; returns a plain copy."""
    heap = GuardedHeap()
    args = tuple(_adopt_all(heap, a, f"argument {k}") for k, a in enumerate(args))
    kwargs = {name: _adopt_all(heap, v, name) for name, v in kwargs.items()}
    inputs = [(block, block.raw[block.start:block.end].copy()) for block in heap.blocks]
    name = getattr(kernel, "__name__", "kernel")
    with buffers.use_allocator(heap.empty):
        result = kernel(*args, **kwargs)
    heap.check(name)
    for block, before in inputs:
        if not np.array_equal(block.raw[block.start:block.end], before):
            raise GuardError(f"{name} modified its {block.label}")
    if not heap.owns(result):
        raise GuardError(f"{name} returned an array that did not come from compiler.backends.cpu.buffers")
    return np.array(result)
