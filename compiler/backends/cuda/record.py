"""Compile time: list the kernels a graph's GPU nodes will launch, and generate their PTX once.

`Recorder` is a GpuBackend without memory.  Running a node's operator code on
it with placeholder tensors goes through the same validation and planning as a
real run, so what it records (kernel, grid, block, shared memory, PTX hash) is
exactly what the GPU will be asked to do, and every PTX is generated (and any
generator error raised) before the module is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vtakit.compiler.backends.cuda.device_array import Argument, Buffer, DeviceArray
from vtakit.compiler.backends.cuda.kernel import GPU, GpuKernel
from vtakit.compiler.backends.cuda.target import DEFAULT_ARCH, ptx_key
from vtakit.errors import DeviceError


@dataclass(frozen=True)
class LaunchRecord:
    """One kernel launch of one node, as the module's manifest lists it."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    ptx_sha256: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-shaped (lists, not tuples), so a saved and reloaded manifest compares equal."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


class Recorder:
    """A GpuBackend that records launches per node instead of running them (placeholder memory)."""

    label = "recorder"
    records_only = True  # launches are recorded, nothing runs: host code gets placeholders (ops.epilogues)

    def __init__(self, arch: str = DEFAULT_ARCH):
        self.arch = arch
        self.node = ""
        self.launches: dict[str, list[LaunchRecord]] = {}
        self.ptx: dict[str, str] = {}
        self.kernels: list[GpuKernel] = []  # every launch's kernel, in order

    def empty(self, shape: Sequence[int], dtype: Any) -> DeviceArray:
        return DeviceArray(tuple(int(s) for s in shape), np.dtype(dtype), Buffer(self, 0, 0))

    def upload(self, array: np.ndarray) -> DeviceArray:
        return self.empty(array.shape, array.dtype)

    def download(self, array: DeviceArray) -> np.ndarray:
        raise DeviceError("the compile-time recorder holds no data to download")

    def synchronize(self) -> None:
        """Nothing runs."""

    def launch(self, kernel: GpuKernel, args: Sequence[Argument]) -> None:
        built = kernel.built(GPU)
        key = ptx_key(built.ir_text, self.arch)
        if key not in self.ptx:
            self.ptx[key] = kernel.ptx(self.arch)
        self.kernels.append(kernel)
        record = LaunchRecord(kernel.name, kernel.launch.grid, kernel.launch.block, built.shared_bytes, key)
        self.launches.setdefault(self.node, []).append(record)
