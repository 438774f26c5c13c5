"""The guard-byte harness catches what it is for: deliberately broken kernels fail, correct ones pass.

The broken kernels are built with the same `KernelBuilder` as the real ones and
allocate through `compiler.backends.cpu.buffers`, so they go through exactly the path
the property tests use; one of them repeats issue 13's bug (an int8 tail
stored as a four-byte int32).
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.support.guards import GuardedHeap, GuardError, guarded_call
from llvmlite import ir

from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.cpu import buffers
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32, KernelBuilder, pointer
from vtakit.compiler.backends.cpu.codegen import compile_ir


def _copy_kernel(count: int, first: int, last: int):
    """y[i] = x[i] for first <= i < last: out of bounds when first < 0 or last > count."""
    kb = KernelBuilder("broken_copy", ["x", "y"])
    with kb.loop(last, start=first) as i:
        kb.store(kb.load(kb["x"], i, F32), kb["y"], i)
    return compile_ir(*kb.finish(), op="broken_copy")


def copy_with_range(x: np.ndarray, first: int, last: int) -> np.ndarray:
    y = buffers.empty(x.shape, np.float32)
    _copy_kernel(x.size, first, last)(pointer(x), pointer(y))
    return y


def _int8_tail_kernel(count: int):
    """The miscompile of issue 13 by hand: the last int8 output stored as an untruncated int32."""
    kb = KernelBuilder("wide_tail", ["x", "y"])
    with kb.loop(count - 1) as i:
        kb.store(kb.load(kb["x"], i, I8), kb["y"], i)
    last = kb.b.sext(kb.load(kb["x"], count - 1, I8), I32)
    kb.store(last, kb.b.bitcast(kb.ptr(kb["y"], count - 1, I8), ir.PointerType()), 0)
    return compile_ir(*kb.finish(), op="wide_tail")


def requant_with_wide_tail(x: np.ndarray) -> np.ndarray:
    y = buffers.empty(x.shape, np.int8)
    _int8_tail_kernel(x.size)(pointer(x), pointer(y))
    return y


def test_a_correct_kernel_passes():
    x = np.arange(13, dtype=np.float32)
    np.testing.assert_array_equal(guarded_call(copy_with_range, x, 0, 13), x)


# The stray element is a copy of the input's guard bytes, so an edge byte can equal the output's guard by
# chance (1/128 each): the reported range lies within the element.
def test_one_element_past_the_output_is_caught():
    with pytest.raises(GuardError, match=r"allocation 1 \(13,\) float32: bytes [0-3]\.\.[0-3] after it"):
        guarded_call(copy_with_range, np.arange(13, dtype=np.float32), 0, 14)


def test_one_element_before_the_output_is_caught():
    with pytest.raises(GuardError, match=r"bytes -[1-4]\.\.-[1-4] before it"):
        guarded_call(copy_with_range, np.arange(13, dtype=np.float32), -1, 13)


def test_issue13_wide_int8_tail_store_is_caught():
    x = np.full(49, 7, np.int8)  # sign-extended: the three stray bytes are 0x00, which no guard byte is (odd)
    with pytest.raises(GuardError, match=r"\(49,\) int8: bytes 0\.\.2 after it"):
        guarded_call(requant_with_wide_tail, x)


def test_a_scratch_buffer_one_element_short_is_caught():
    """A real kernel with an off-by-one buffer size (the issue asked "the scratch buffer's size?"): conv2d's
    im2col scratch allocated one element short, so the kernel fills one element past it."""
    heap = GuardedHeap()

    def short_scratch(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return heap.empty((shape[0] - 1,) if len(shape) == 1 else shape, dtype)

    x = np.ones((1, 3, 5, 5), np.float32)
    w = np.ones((4, 3, 3, 3), np.float32)
    with buffers.use_allocator(short_scratch):
        cpu.conv2d(x, w, pads=(1, 1, 1, 1))
    with pytest.raises(GuardError, match="after it"):
        heap.check("conv2d")


def test_a_kernel_that_writes_its_input_is_caught():
    def scribble(x: np.ndarray) -> np.ndarray:
        x[3] = 0
        return buffers.full(x.shape, 1, x.dtype)

    with pytest.raises(GuardError, match="scribble modified its input argument 0"):
        guarded_call(scribble, np.ones(8, np.float32))


def test_a_result_not_from_the_allocation_point_is_caught():
    with pytest.raises(GuardError, match="did not come from compiler.backends.cpu.buffers"):
        guarded_call(lambda x: np.empty_like(x), np.ones(8, np.float32))


def test_outputs_start_poisoned_and_the_allocator_is_restored():
    heap = GuardedHeap()
    with buffers.use_allocator(heap.empty):
        y = buffers.empty((2, 3), np.int8)
        z = buffers.full(5, 7, np.int32)
    assert (y == np.int8(-51)).all() and (z == 7).all() and heap.owns(y) and heap.owns(z)
    assert not heap.owns(buffers.empty(4, np.int8))
    heap.check()
