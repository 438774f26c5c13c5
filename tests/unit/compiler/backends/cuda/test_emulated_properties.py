"""Property-based tests of every GPU kernel family, emulated on the host, against numpy references (issue 13).

The properties, cases and references are the CPU backend's (tests/support:
kernel_properties, kernel_cases, sweep), so both backends face the same
independent references, not each other.  Each call runs on a fresh Emulator
with the inputs uploaded by hand: every launch checks the guard bytes around
its arguments and shared memory, then the test checks every live array's
guards and that the inputs are unchanged.  The tiled GEMM (conv2d, dense,
matmul) and the block reductions (softmax, global_avg_pool) run 256 OS threads
per block under emulation, so their cases are smaller than the CPU's.  The
200-case sweep of each: tests/integration/compiler/backends/cuda/test_emulated_properties.py.
"""

from __future__ import annotations

from typing import Any

from tests.support import kernel_cases as cases
from tests.support import kernel_properties as props
import numpy as np
import pytest
from tests.support.sweep import budgets, check

from vtakit.compiler.backends import cuda
from vtakit.compiler.backends.cuda import DeviceArray

GEMM_BLOCKS = 16  # blocks x K steps of one emulated GEMM launch (about 20 ms each)
BIG_GEMM_BLOCKS = 200  # the same for cases with more than 1,000 channels (a few percent of them)


def emulated(name: str, *args: Any, **kwargs: Any) -> np.ndarray:
    """cuda.<name> on a fresh Emulator: guards checked after the call, inputs checked unchanged."""
    gpu = cuda.Emulator()
    inputs: list[tuple[DeviceArray, bytes]] = []

    def upload(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            device = gpu.upload(value)
            inputs.append((device, value.tobytes()))
            return device
        if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
            return type(value)(upload(v) for v in value)
        return value

    args = tuple(upload(a) for a in args)
    kwargs = {k: upload(v) for k, v in kwargs.items()}
    result = getattr(cuda, name)(*args, **kwargs)
    gpu.check_guards()
    for device, before in inputs:
        assert device.buffer.storage[:device.nbytes].tobytes() == before, f"{name} modified an input"
    assert isinstance(result, DeviceArray) and result.backend is gpu, result
    return result.numpy()


GPU = emulated


@budgets(fast=8)
def test_conv2d_tiled(examples):
    check(examples, "cuda.conv2d.tiled",
          cases.conv_cases(depthwise=False, max_channels=24, max_size=9, max_blocks=GEMM_BLOCKS,
                           max_big_blocks=BIG_GEMM_BLOCKS),
          props.conv2d_property(GPU))


@budgets(fast=10)
def test_conv2d_depthwise(examples):
    check(examples, "cuda.conv2d.depthwise", cases.conv_cases(depthwise=True, max_channels=40, max_size=12),
          props.conv2d_property(GPU))


@budgets(fast=8)
def test_dense(examples):
    check(examples, "cuda.dense", cases.dense_cases(max_blocks=GEMM_BLOCKS, max_big_blocks=BIG_GEMM_BLOCKS),
          props.dense_property(GPU))


@budgets(fast=8)
def test_matmul(examples):
    check(examples, "cuda.matmul", cases.matmul_cases(max_blocks=GEMM_BLOCKS, max_big_blocks=BIG_GEMM_BLOCKS),
          props.matmul_property(GPU))


@budgets(fast=10)
@pytest.mark.parametrize("name, op", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply)])
def test_binary(examples, name, op):
    check(examples, f"cuda.{name}", cases.elementwise_cases("binary"), props.binary_property(GPU, name, op))


@budgets(fast=10)
@pytest.mark.parametrize("name", ["relu", "clip", "quantize", "dequantize"])
def test_unary(examples, name):
    check(examples, f"cuda.{name}", cases.elementwise_cases(name), props.unary_property(GPU, name))


@budgets(fast=10)
@pytest.mark.parametrize("name", ["quantize_linear", "dequantize_linear"])
def test_linear_quantization(examples, name):
    check(examples, f"cuda.{name}", cases.elementwise_cases(name), props.linear_quant_property(GPU, name))


@budgets(fast=10)
def test_add_int8(examples):
    check(examples, "cuda.add_int8", cases.elementwise_cases("add_int8"), props.add_int8_property(GPU))


@budgets(fast=10)
def test_batch_norm(examples):
    check(examples, "cuda.batch_norm", cases.batch_norm_cases(), props.batch_norm_property(GPU))


@budgets(fast=8)
def test_softmax(examples):
    check(examples, "cuda.softmax", cases.softmax_cases(max_rows=24), props.softmax_property(GPU))


@budgets(fast=10)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d(examples, kind):
    check(examples, f"cuda.{kind}_pool2d", cases.pool_cases(kind), props.pool_property(GPU, kind))


@budgets(fast=8)
def test_global_avg_pool(examples):
    planes = cases.nchw_cases(("int8", "float32"), max_channels=5, max_size=16, big_percent=0)  # a block per plane
    check(examples, "cuda.global_avg_pool", planes, props.global_avg_pool_property(GPU))


LAYOUT_CASES = {"transpose": cases.transpose_cases(), "pad": cases.pad_cases(), "concat": cases.concat_cases(),
                "pack_activation": cases.packing_cases(), "unpack_activation": cases.packing_cases()}


@budgets(fast=10)
@pytest.mark.parametrize("name", list(LAYOUT_CASES))
def test_layout(examples, name):
    check(examples, f"cuda.{name}", LAYOUT_CASES[name], props.layout_property(GPU, name))

