"""A stand-in for `cuda.bindings.driver` whose device memory is host memory, for testing runtime.py here.

It follows the bindings' conventions (every call returns a tuple that starts
with a CUresult; device pointers are integers) and checks what the runtime
hands it: PTX must arrive NUL-terminated, launches must pass an array of
pointers to 8-byte parameters.  A launch runs the kernel's host form (the
emulator's compiled function) on the decoded parameters, so numbers come out
as they would on a GPU.  What it cannot check: that the real bindings accept
these argument types, and the PTX itself (ptxas tests do that).
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
from cuda.bindings import driver as real

from vtakit.compiler.backends.cpu.jit import KernelKey, get_kernel
from vtakit.compiler.backends.cuda.kernel import HOST, GpuKernel

CUresult = real.CUresult
CUdevice_attribute = real.CUdevice_attribute
OK = CUresult.CUDA_SUCCESS


class FakeDriver:
    CUdevice_attribute = CUdevice_attribute

    def __init__(self, capability: tuple[int, int] = (9, 0), memory_bytes: int = 1 << 26):
        self.capability = capability
        self.memory_left = memory_bytes
        self.blocks: dict[int, ctypes.Array] = {}
        self.calls: list[str] = []
        self.loaded_ptx: list[str] = []
        self.launches: list[tuple[str, tuple, tuple, list[int]]] = []
        self.kernels: dict[str, GpuKernel] = {}  # filled by the test: name -> kernel, to run launches
        self.fail: dict[str, CUresult] = {}

    def _enter(self, name: str) -> CUresult | None:
        self.calls.append(name)
        return self.fail.get(name)

    def cuGetErrorName(self, status):
        return OK, status.name.encode()

    def cuGetErrorString(self, status):
        return OK, b"fake driver error"

    def cuInit(self, flags):
        return (self._enter("cuInit") or OK,)

    def cuDeviceGetCount(self):
        return self._enter("cuDeviceGetCount") or OK, 1

    def cuDeviceGet(self, ordinal):
        return self._enter("cuDeviceGet") or OK, ordinal

    def cuDevicePrimaryCtxRetain(self, device):
        return self._enter("cuDevicePrimaryCtxRetain") or OK, "context"

    def cuCtxSetCurrent(self, context):
        assert context == "context"
        return (self._enter("cuCtxSetCurrent") or OK,)

    def cuDeviceGetAttribute(self, attribute, device):
        self._enter("cuDeviceGetAttribute")
        major = attribute == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        return OK, self.capability[0] if major else self.capability[1]

    def cuDeviceGetName(self, length, device):
        return OK, b"Fake GPU".ljust(length, b"\0")

    def cuMemAlloc(self, nbytes):
        if self._enter("cuMemAlloc") or nbytes > self.memory_left:
            return CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0
        block = (ctypes.c_uint8 * nbytes)()
        address = ctypes.addressof(block)
        self.blocks[address] = block
        self.memory_left -= nbytes
        return OK, address

    def cuMemFree(self, address):
        self._enter("cuMemFree")
        self.memory_left += len(self.blocks.pop(address))
        return (OK,)

    def _check_device_range(self, address: int, nbytes: int) -> None:
        assert any(a <= address and address + nbytes <= a + len(b) for a, b in self.blocks.items()), \
            "a copy outside any allocation"

    def cuMemcpyHtoD(self, device, host, nbytes):
        self._enter("cuMemcpyHtoD")
        self._check_device_range(device, nbytes)
        ctypes.memmove(device, host, nbytes)
        return (OK,)

    def cuMemcpyDtoH(self, host, device, nbytes):
        self._enter("cuMemcpyDtoH")
        self._check_device_range(device, nbytes)
        ctypes.memmove(host, device, nbytes)
        return (OK,)

    def cuModuleLoadData(self, image):
        if self._enter("cuModuleLoadData"):
            return self.fail["cuModuleLoadData"], None
        ptx = ctypes.string_at(image).decode()  # stops at the NUL the runtime must append
        assert ptx.startswith("//") and ".entry" in ptx
        self.loaded_ptx.append(ptx)
        return OK, ptx

    def cuModuleGetFunction(self, module, name):
        self._enter("cuModuleGetFunction")
        assert re.search(rf"\.entry {re.escape(name.decode())}\(", module), "no such kernel in the module"
        params = len(re.findall(r"\.param \.u64", module.split(f".entry {name.decode()}(")[1].split(")")[0]))
        return OK, (name.decode(), params)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if self._enter("cuLaunchKernel"):
            return (self.fail["cuLaunchKernel"],)
        name, count = function
        assert extra == 0 and stream == 0
        pointers = np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(params))
        values = [ctypes.c_uint64.from_address(int(p)).value for p in pointers]
        self.launches.append((name, (gx, gy, gz), (bx, by, bz), values))
        self._run(self.kernels[name], values)
        return (OK,)

    def cuCtxSynchronize(self):
        return (self._enter("cuCtxSynchronize") or OK,)

    @staticmethod
    def _run(kernel: GpuKernel, values: list[int]) -> None:
        """Execute a barrier-free kernel's host form on the decoded parameters (device memory is host memory)."""
        built = kernel.built(HOST)
        assert not built.uses_barrier, "the fake driver runs barrier-free kernels only"
        entry = f"{kernel.name}__grid"
        argtypes = [ctypes.c_void_p] * (len(kernel.pointers) + 2) + [ctypes.c_int64] * len(kernel.integers)
        compiled = get_kernel(KernelKey("cuda-emulated", (kernel.key, entry)), lambda: (built.ir_text, entry, argtypes),
                              kernel.name)
        pointers, integers = values[:len(kernel.pointers)], values[len(kernel.pointers):]
        ids = (ctypes.c_int32 * 12)()
        compiled(*pointers, ctypes.addressof(ids), None, *[ctypes.c_int64(v).value for v in integers])
