"""The CUDA runtime without a GPU: here cuInit fails and says so in one line; against a fake driver whose
device memory is host memory, the runtime's call sequence, parameter packing, memory pool and error
conversion are checked, and operators computed through it match the CPU backend."""

import gc

import numpy as np
import pytest

from tests.support.fake_driver import FakeDriver, CUresult
from tests.support.gpu_marks import GPU_OK
from vtakit.compiler.backends import cpu, cuda
from vtakit.compiler.backends.cuda import kernel as kernel_module
from vtakit.compiler.backends.cuda import driver_api
from vtakit.errors import DeviceError


@pytest.mark.skipif(GPU_OK, reason="a GPU is present: there is no missing-driver error to check")
def test_without_a_gpu_every_entry_point_says_why_in_one_line():
    ok, reason = cuda.gpu_available()
    assert not ok and reason.startswith("no usable CUDA GPU: cuInit failed:") and "\n" not in reason
    with pytest.raises(DeviceError, match="cuInit failed") as info:
        cuda.relu(np.zeros(4, np.float32))
    assert "\n" not in str(info.value)


@pytest.fixture
def fake(monkeypatch):
    """A FakeDriver in place of cuda.bindings.driver; every kernel launched is registered with it to run."""
    driver = FakeDriver()
    monkeypatch.setattr(driver_api, "_driver", lambda: driver)
    original = kernel_module.GpuKernel.ptx

    def ptx(self, arch):
        driver.kernels[self.name] = self
        return original(self, arch)

    monkeypatch.setattr(kernel_module.GpuKernel, "ptx", ptx)
    return driver


def test_context_and_arch(fake):
    gpu = driver_api.CudaGpu(0)
    assert fake.calls[:3] == ["cuInit", "cuDeviceGetCount", "cuDeviceGet"]
    assert gpu.name == "Fake GPU" and gpu.capability == (9, 0) and gpu.arch == "sm_80"  # sm_80 PTX, JIT for sm_90
    assert "Fake GPU" in repr(gpu)
    fake.capability = (7, 5)
    assert driver_api.CudaGpu(0).arch == "sm_75"
    with pytest.raises(DeviceError, match="no CUDA device 3: 1 device"):
        driver_api.CudaGpu(3)


def test_operators_through_the_runtime_match_the_cpu_backend(fake):
    gpu = driver_api.CudaGpu(0)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 1, 5)).astype(np.float32)
    np.testing.assert_array_equal(cuda.add(a, b, gpu=gpu), cpu.add(a, b))
    q = rng.integers(-128, 128, (1, 20, 3, 3)).astype(np.int8)
    np.testing.assert_array_equal(cuda.pad(q, [0, 1, 0, 2, 0, 3, 1, 0], value=-7, gpu=gpu),
                                  cpu.pad(q, [0, 1, 0, 2, 0, 3, 1, 0], -7))
    parts = [q, q[:, :5]]
    np.testing.assert_array_equal(cuda.concat(parts, 1, gpu=gpu), cpu.concat(parts, 1))  # non-zero i64 offsets
    assert len(fake.loaded_ptx) == 4 and all(p.startswith("//") for p in fake.loaded_ptx)  # add, pad, 2 copies
    name, grid, block, values = fake.launches[0]
    assert name == "ew_add" and block == (256, 1, 1) and len(values) == 6  # 3 pointers, 3 offsets
    assert values[3:] == [0, 0, 0] and all(v in _starts(fake) for v in values[:3])
    concat_offsets = [v[-1] for n, _, _, v in fake.launches if n == "ew_copy"]
    assert concat_offsets == [0, 20 * 9]


def _starts(fake):
    return set(fake.blocks)


def test_modules_are_loaded_once_per_kernel(fake):
    gpu = driver_api.CudaGpu(0)
    x = np.ones(10, np.float32)
    for _ in range(3):
        cuda.relu(x, gpu=gpu)
    assert fake.calls.count("cuModuleLoadData") == 1 and fake.calls.count("cuLaunchKernel") == 3


def test_memory_is_pooled(fake):
    gpu = driver_api.CudaGpu(0)
    x = np.ones((64, 64), np.float32)
    cuda.relu(x, gpu=gpu)
    gc.collect()
    allocations = fake.calls.count("cuMemAlloc")
    for _ in range(5):
        cuda.relu(x, gpu=gpu)
        gc.collect()
    assert fake.calls.count("cuMemAlloc") == allocations  # freed arrays came back from the pool
    held = gpu.pool.allocated_bytes
    assert held >= 2 * x.nbytes
    gpu.pool.trim()
    assert gpu.pool.allocated_bytes == 0 and fake.calls.count("cuMemFree") == allocations
    assert driver_api.MemoryPool.size_class(1) == 256 and driver_api.MemoryPool.size_class(3 << 20) == 3 << 20


def test_driver_errors_become_one_line_device_errors(fake):
    gpu = driver_api.CudaGpu(0)
    fake.memory_left = 1000
    with pytest.raises(DeviceError, match=r"^cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY \(fake driver error\)$"):
        gpu.upload(np.zeros(10_000, np.float32))
    fake.fail["cuModuleLoadData"] = CUresult.CUDA_ERROR_INVALID_PTX
    with pytest.raises(DeviceError, match="cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX"):
        cuda.relu(np.zeros(4, np.float32), gpu=gpu)
    fake.fail["cuInit"] = CUresult.CUDA_ERROR_NO_DEVICE
    with pytest.raises(DeviceError, match="cuInit failed: CUDA_ERROR_NO_DEVICE"):
        driver_api.CudaGpu(0)
