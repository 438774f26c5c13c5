"""device="cpu" and device="sim" give the same bits on every zoo model (issue 13).

"cpu" runs every node with the host kernels, the bit-exact reference of the
accelerator's arithmetic; "sim" runs the accelerator's tasks on the cycle model
and the rest on the same host kernels.  A wrong host kernel (as the int8
requantizing conv of issue 13 was) shows up as different logits.  Both runs
allocate through the guard-byte heap, so a stray write by a host kernel inside a
real network fails too.  The ImageNet-sized models take minutes: slow suite.
"""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.backends.cpu import buffers

from tests.support.guards import GuardedHeap

SMALL = ("small_cnn", "digits_cnn")


def inputs(name: str, rng: np.random.Generator) -> np.ndarray:
    shape = zoo.input_shape(name)
    if name == "digits_cnn":  # its preprocessing: pixels / 16 in [0, 1]
        return rng.random(shape, dtype=np.float32)
    return rng.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in SMALL else pytest.mark.slow) for n in zoo.NAMES])
def test_cpu_and_sim_are_bit_identical(name):
    rng = np.random.default_rng(13)
    model = zoo.build(name, batch=1)
    module = vtakit.compile(model, "pynq", calibrate=[inputs(name, rng) for _ in range(2)])
    assert module.vta_tasks(), "nothing runs on the accelerator: the comparison would be empty"
    heap = GuardedHeap()
    for _ in range(2):
        x = inputs(name, rng)
        with buffers.use_allocator(heap.empty):
            want = module.run(x, device="cpu")
            got = module.run(x, device="sim")
        heap.check(f"a host kernel in {name}")
        assert got.keys() == want.keys()
        for output, value in want.items():
            assert got[output].dtype == value.dtype and got[output].shape == value.shape
            mismatched = int(np.count_nonzero(got[output] != value))
            assert mismatched == 0, f"{name} {output}: {mismatched} of {value.size} values differ between cpu and sim"
