"""The emulator's guard bytes: every launch checks the canaries around its arguments and its shared memory,
so a GPU kernel that writes out of bounds fails under emulation instead of corrupting the host heap."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends import cuda
from vtakit.compiler.backends.cpu.irgen import F32
from vtakit.compiler.backends.cuda.emulate import GUARD_BYTES
from vtakit.compiler.backends.cuda.kernel import grid_1d, make_kernel
from vtakit.errors import DeviceError


def copy_kernel(count: int, first: int, last: int) -> cuda.GpuKernel:
    """y[i] = x[i] for first <= i < last, grid-stride (out of bounds when first < 0 or last > count)."""
    def emit(kb, spec) -> None:
        with kb.grid_stride(last - first) as item:
            at = kb.idx(item, first)
            kb.store(kb.load(kb["x"], at, F32), kb["y"], at)
    return make_kernel("guard_copy", (count, first, last), grid_1d(last - first), ["x", "y"], [], emit)


def shared_kernel(count: int, extra: int) -> cuda.GpuKernel:
    """Each thread writes shared[tid] (tid < count + extra, the array holds count), barrier, y[tid] = shared[tid]."""
    def emit(kb, spec) -> None:
        tile = kb.shared_array(F32, count, "tile")
        tid = kb.thread("x")
        kb.store(kb.load(kb["x"], tid, F32), tile, tid)
        kb.barrier()
        with kb.if_then(kb.b.icmp_unsigned("<", tid, kb.i64(count))):
            kb.store(kb.load(tile, tid, F32), kb["y"], tid)
    return make_kernel("guard_shared", (count, extra), cuda.Launch((1, 1, 1), (count + extra, 1, 1)), ["x", "y"],
                       [], emit)


def test_a_correct_kernel_passes():
    gpu = cuda.Emulator()
    x = gpu.upload(np.arange(40, dtype=np.float32))
    y = gpu.empty((40,), np.float32)
    gpu.launch(copy_kernel(40, 0, 40), [x, y])
    gpu.check_guards()
    np.testing.assert_array_equal(y.numpy(), np.arange(40, dtype=np.float32))


def test_one_element_past_an_argument_is_caught_at_the_launch():
    """The kernel copies x's trailing guard into y's: caught because guards differ by address (an edge byte
    can match by chance, 1/128 each, so the reported range lies within the element)."""
    gpu = cuda.Emulator()
    x, y = gpu.upload(np.arange(40, dtype=np.float32)), gpu.empty((40,), np.float32)
    with pytest.raises(DeviceError, match=r"guard_copy wrote outside its argument y: bytes [0-3]\.\.[0-3] after it"):
        gpu.launch(copy_kernel(40, 0, 41), [x, y])


def test_one_element_before_an_argument_is_caught():
    gpu = cuda.Emulator()
    x, y = gpu.upload(np.arange(40, dtype=np.float32)), gpu.empty((40,), np.float32)
    with pytest.raises(DeviceError, match=r"argument y: bytes -[1-4]\.\.-[1-4] before it"):
        gpu.launch(copy_kernel(40, -1, 40), [x, y])


def test_a_shared_memory_overflow_is_caught():
    gpu = cuda.Emulator()
    x, y = gpu.upload(np.arange(40, dtype=np.float32)), gpu.empty((32,), np.float32)
    gpu.launch(shared_kernel(32, 0), [x, y])  # the same kernel in bounds
    with pytest.raises(DeviceError, match=r"guard_shared wrote outside its shared memory: bytes 0\.\.7 after it"):
        gpu.launch(shared_kernel(32, 2), [x, y])


def test_check_guards_sees_every_live_array():
    """A stray write from anywhere (here: by hand, into the guard before an array) is found by check_guards."""
    gpu = cuda.Emulator()
    arrays = [gpu.empty((n,), np.int8) for n in (1, 7, 64)]
    gpu.check_guards()
    storage = arrays[1].buffer.storage
    offset = storage.ctypes.data - storage.base.ctypes.data
    storage.base[offset - GUARD_BYTES] ^= 0xFF
    with pytest.raises(DeviceError, match=rf"bytes -{GUARD_BYTES}\.\.-{GUARD_BYTES} before it of a 7-byte buffer"):
        gpu.check_guards()


def test_real_operators_keep_their_guards():
    gpu = cuda.Emulator()
    x = gpu.upload(np.ones((1, 3, 5, 5), np.float32))
    y = cuda.relu(cuda.conv2d(x, np.ones((4, 3, 3, 3), np.float32), pads=(1, 1, 1, 1)))
    gpu.check_guards()
    assert y.numpy()[0, 0, 2, 2] == 27


@pytest.mark.parametrize("count", [17, 33, 81])
def test_float_to_int8_kernels_stay_inside_their_output(count):
    """Inlined into the loop over threads, these kernels were vectorised with a masked int8 store that LLVM
    compiled as a 4-byte store past the output's end (n = 1 mod 16); the kernel is now called per thread."""
    gpu = cuda.Emulator()
    x = np.linspace(-3, 3, count, dtype=np.float32)
    q = cuda.quantize(gpu.upload(x), 2)
    u = cuda.quantize_linear(gpu.upload(x), 0.05, 7, np.uint8)
    gpu.check_guards()
    np.testing.assert_array_equal(q.numpy(), np.clip(np.rint(x * 4), -128, 127).astype(np.int8))
    np.testing.assert_array_equal(u.numpy(), np.clip(np.rint(x / np.float32(0.05)) + 7, 0, 255).astype(np.uint8))
