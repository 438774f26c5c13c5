"""Device-resident tensors and the protocol every GPU backend implements.

A `DeviceArray` is a shape and dtype over a `Buffer` that a backend owns: the
CUDA driver API (`driver_api.CudaGpu`, device memory), the host emulator
(`emulate.Emulator`, host memory) or the compile-time recorder
(`record.Recorder`, no memory at all).  The kernel families only talk to this
protocol, so the same operator code launches on a GPU, runs emulated on the
host, or lists the launches a module will make.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from vtakit.compiler.backends.host import checks
from vtakit.errors import CompileError


class Buffer:
    """One allocation: its device address and size; `release` hands it back when the last user is gone."""

    def __init__(self, backend: "GpuBackend", address: int, nbytes: int, storage: Any = None):
        self.backend = backend
        self.address = address
        self.nbytes = nbytes
        self.storage = storage  # what keeps host-side memory alive (emulator), else None


@dataclass(frozen=True, eq=False)
class DeviceArray:
    """A C-contiguous tensor in a backend's memory (shares its Buffer with reshaped views)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    buffer: Buffer

    @property
    def backend(self) -> "GpuBackend":
        return self.buffer.backend

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def reshape(self, *shape: int | Sequence[int]) -> "DeviceArray":
        """The same memory seen with another shape (one -1 allowed), as numpy's reshape of a contiguous array."""
        dims = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        dims = tuple(int(d) for d in dims)
        if dims.count(-1) > 1:
            raise CompileError(f"cannot reshape {self.shape} to {dims}: more than one -1", op="reshape")
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or self.size % known:
                raise CompileError(f"cannot reshape {self.shape} to {dims}", op="reshape")
            dims = tuple(self.size // known if d == -1 else d for d in dims)
        if math.prod(dims) != self.size:
            raise CompileError(f"cannot reshape {self.shape} to {dims}", op="reshape")
        return DeviceArray(dims, self.dtype, self.buffer)

    def numpy(self) -> np.ndarray:
        """A host copy."""
        return self.backend.download(self)

    def __repr__(self) -> str:
        return f"DeviceArray({self.shape}, {self.dtype.name}, on {self.backend.label})"


Argument = DeviceArray | int


class GpuBackend(Protocol):
    """Memory and launches: what the kernel families need from a GPU (or its stand-ins)."""

    label: str
    arch: str

    def empty(self, shape: Sequence[int], dtype: Any) -> DeviceArray: ...

    def upload(self, array: np.ndarray) -> DeviceArray: ...

    def download(self, array: DeviceArray) -> np.ndarray: ...

    def launch(self, kernel: Any, args: Sequence[Argument]) -> None: ...

    def synchronize(self) -> None: ...


def operand(value: Any, name: str, op: str, dtypes: Iterable[np.dtype], ndim: int | None = None):
    """A DeviceArray checked like `cpu.checks.array` checks numpy arrays (numpy goes through that check)."""
    if not isinstance(value, DeviceArray):
        return checks.array(value, name, op, dtypes, ndim)
    checks.check_dtype_shape(value, name, op, dtypes, ndim)
    return value


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of `shape`."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def broadcast_strides(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """Element strides that read a contiguous `shape` broadcast to `target` (0 along broadcast axes)."""
    own = contiguous_strides(shape)
    lead = len(target) - len(shape)
    return tuple(0 if i < lead or shape[i - lead] == 1 and target[i] != 1 else own[i - lead]
                 for i in range(len(target)))
