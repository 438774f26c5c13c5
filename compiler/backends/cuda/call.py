"""Where an operator call runs and what it returns: the one rule every public GPU function follows.

If any array operand is a `DeviceArray`, the call runs on that array's backend
and returns a `DeviceArray` (data stays on the device between operators).
Otherwise (numpy in, as with `compiler.backends.cpu`) it runs on `gpu` or the default
CUDA device, and the result is copied back as a numpy array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vtakit.compiler.backends.cuda.device_array import Argument, DeviceArray, GpuBackend
from vtakit.compiler.backends.cuda.driver_api import default_gpu
from vtakit.compiler.backends.cuda.kernel import GpuKernel
from vtakit.errors import DeviceError


class Call:
    """One operator invocation: picks the backend, moves numpy operands over, launches, returns."""

    def __init__(self, op: str, operands: Sequence[Any], gpu: GpuBackend | None):
        self.op = op
        first = next((a for a in operands if isinstance(a, DeviceArray)), None)
        if first is not None:
            if gpu is not None and gpu is not first.backend:
                raise DeviceError(f"{op}: the operand lives on {first.backend.label}, the call asked for {gpu.label}")
            self.backend, self.host_result = first.backend, False
        else:
            if gpu is None:
                gpu = default_gpu()
            self.backend, self.host_result = gpu, True

    def device(self, value: np.ndarray | DeviceArray) -> DeviceArray:
        """`value` in this backend's memory (numpy is uploaded)."""
        if isinstance(value, DeviceArray):
            if value.backend is not self.backend:
                raise DeviceError(f"{self.op}: operands live on {value.backend.label} and {self.backend.label}")
            return value
        return self.backend.upload(value)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> DeviceArray:
        return self.backend.empty(shape, dtype)

    def launch(self, kernel: GpuKernel, *args: Argument) -> None:
        self.backend.launch(kernel, args)

    def result(self, value: DeviceArray) -> np.ndarray | DeviceArray:
        return self.backend.download(value) if self.host_result else value
