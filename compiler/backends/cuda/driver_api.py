"""The CUDA driver API (cuda-bindings): context, device memory pool, PTX modules and launches.

Every driver call goes through `_call`, which turns a failing CUresult (or a
driver library that cannot be loaded) into one `DeviceError` naming the call
and the error.  Launches are asynchronous on the default stream; copies to the
host wait for them, so an error inside a kernel surfaces at the next copy or
`synchronize()` with that call's name.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from vtakit.compiler.backends.cuda.device_array import Argument, Buffer, DeviceArray
from vtakit.compiler.backends.cuda.target import DEFAULT_ARCH, GpuTarget, ptx_key
from vtakit.errors import DeviceError
from vtakit.isa.arith import ceil_div

_ALL_BITS = (1 << 64) - 1


def _driver():
    try:
        from cuda.bindings import driver  # lazy: cuda (cuda-bindings, the cuda extra)
    except ImportError:
        raise DeviceError("the CUDA driver bindings are not installed (pip install cuda-bindings)") from None
    return driver


def _call(name: str, *args: Any) -> Any:
    """driver.<name>(*args), raising DeviceError('<name> failed: ...') unless it returns CUDA_SUCCESS."""
    driver = _driver()
    try:
        result = getattr(driver, name)(*args)
    except Exception as exc:  # the bindings raise when libcuda itself cannot be loaded
        raise DeviceError(f"{name} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    status, values = result[0], result[1:]
    if int(status) != 0:
        raise DeviceError(f"{name} failed: {_error_text(status)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def _error_text(status: Any) -> str:
    driver = _driver()
    try:
        code, label = driver.cuGetErrorName(status)
        code2, text = driver.cuGetErrorString(status)
        if int(code) == 0 and int(code2) == 0:
            return f"{label.decode()} ({text.decode()})"
    except Exception:  # an unknown code: fall back to the number
        pass
    return f"CUresult {int(status)}"


def arch_for(capability: tuple[int, int]) -> str:
    """The PTX target used on a GPU of this compute capability: sm_80 PTX for Ampere and newer."""
    if capability >= GpuTarget(DEFAULT_ARCH).capability:
        return DEFAULT_ARCH
    return f"sm_{capability[0]}{capability[1]}"


class MemoryPool:
    """Device allocations kept for reuse once their arrays are gone, binned by rounded size.

    A network's activations come and go in the same few sizes run after run, so
    after the first run no cuMemAlloc is needed.  `trim` frees the cached blocks.
    """

    def __init__(self, gpu: "CudaGpu"):
        self._gpu = gpu
        self._free: dict[int, list[int]] = defaultdict(list)
        self._lock = threading.Lock()
        self.allocated_bytes = 0

    @staticmethod
    def size_class(nbytes: int) -> int:
        if nbytes <= 1 << 20:
            return max(256, 1 << (max(nbytes, 1) - 1).bit_length())
        return ceil_div(nbytes, 1 << 20) << 20

    def allocate(self, nbytes: int) -> tuple[int, int]:
        size = self.size_class(nbytes)
        with self._lock:
            if self._free[size]:
                return self._free[size].pop(), size
        self._gpu.make_current()
        address = int(_call("cuMemAlloc", size))
        self.allocated_bytes += size
        return address, size

    def release(self, address: int, size: int) -> None:
        with self._lock:
            self._free[size].append(address)

    def trim(self) -> None:
        with self._lock:
            blocks = [(size, a) for size, addresses in self._free.items() for a in addresses]
            self._free.clear()
        self._gpu.make_current()
        for size, address in blocks:
            _call("cuMemFree", address)
            self.allocated_bytes -= size


class CudaGpu:
    """One CUDA device through the driver API: the GpuBackend the module runtime launches kernels on."""

    label = "cuda"

    def __init__(self, ordinal: int = 0):
        _call("cuInit", 0)
        count = _call("cuDeviceGetCount")
        if ordinal >= count:
            raise DeviceError(f"no CUDA device {ordinal}: {count} device(s) present")
        self.device = _call("cuDeviceGet", ordinal)
        self.context = _call("cuDevicePrimaryCtxRetain", self.device)
        self.make_current()
        attribute = _driver().CUdevice_attribute
        major = _call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device)
        minor = _call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device)
        self.capability = (int(major), int(minor))
        self.name = _call("cuDeviceGetName", 256, self.device).split(b"\0")[0].decode()
        self.arch = arch_for(self.capability)
        self.pool = MemoryPool(self)
        self._functions: dict[Any, Any] = {}  # by kernel key and by PTX hash
        self._modules: list[Any] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CudaGpu({self.name}, sm_{self.capability[0]}{self.capability[1]}, PTX for {self.arch})"

    def make_current(self) -> None:
        _call("cuCtxSetCurrent", self.context)

    # -- memory ----------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: Any) -> DeviceArray:
        dtype = np.dtype(dtype)
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        address, size = self.pool.allocate(nbytes)
        buffer = Buffer(self, address, size)
        weakref.finalize(buffer, self.pool.release, address, size)
        return DeviceArray(tuple(int(s) for s in shape), dtype, buffer)

    def upload(self, array: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(array)
        out = self.empty(np.shape(array), host.dtype)  # ascontiguousarray makes a 0-D array 1-D
        self.make_current()
        _call("cuMemcpyHtoD", out.buffer.address, host.ctypes.data, host.nbytes)
        return out

    def download(self, array: DeviceArray) -> np.ndarray:
        host = np.empty(array.shape, array.dtype)
        self.make_current()
        _call("cuMemcpyDtoH", host.ctypes.data, array.buffer.address, array.nbytes)
        return host

    # -- kernels ---------------------------------------------------------------
    def function(self, kernel: Any) -> Any:
        """The loaded CUfunction of a GpuKernel (PTX generated and loaded once per kernel and process)."""
        found = self._functions.get(kernel.key)
        if found is not None:
            return found
        ptx = kernel.ptx(self.arch)
        image_key = ptx_key(kernel.built("gpu").ir_text, self.arch)
        with self._lock:
            found = self._functions.get(image_key)
            if found is None:
                self.make_current()
                image = np.frombuffer(ptx.encode() + b"\0", np.uint8)
                module = _call("cuModuleLoadData", image.ctypes.data)
                self._modules.append(module)
                found = _call("cuModuleGetFunction", module, kernel.name.encode())
                self._functions[image_key] = found
            self._functions[kernel.key] = found
        return found

    def launch(self, kernel: Any, args: Sequence[Argument]) -> None:
        """Launch on the default stream; every parameter is 8 bytes (a device pointer or an i64)."""
        function = self.function(kernel)
        values = np.array([a.buffer.address if isinstance(a, DeviceArray) else int(a) & _ALL_BITS for a in args],
                          dtype=np.uint64)
        pointers = np.array([values.ctypes.data + 8 * i for i in range(len(args))], dtype=np.uint64)
        grid, block = kernel.launch.grid, kernel.launch.block
        self.make_current()
        _call("cuLaunchKernel", function, *grid, *block, 0, 0, pointers.ctypes.data, 0)

    def synchronize(self) -> None:
        self.make_current()
        _call("cuCtxSynchronize")


@lru_cache(maxsize=1)
def default_gpu() -> CudaGpu:
    """The process's GPU 0 (DeviceError, not cached, when there is none)."""
    return CudaGpu(0)


def gpu_available() -> tuple[bool, str]:
    """(True, what GPU) when kernels can run here, else (False, why not) for a test's skip reason."""
    try:
        gpu = default_gpu()
    except DeviceError as exc:
        return False, f"no usable CUDA GPU: {exc}"
    return True, repr(gpu)
