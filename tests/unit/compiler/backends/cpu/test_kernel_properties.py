"""Property-based tests of every host kernel family of compiler.backends.cpu, each call under the guard harness (issue 13).

Random shapes (see kernel_cases) against independent numpy references (see
kernel_properties); `[fast]` here, `[sweep]` (200 cases) in
tests/integration/compiler/backends/cpu/test_kernel_properties.py.  A failure
prints the shrunk case; rerunning the same test replays it, since the seed is
fixed per family.
"""

from __future__ import annotations

from tests.support import kernel_cases as cases
from tests.support import kernel_properties as props
import numpy as np
import pytest
from tests.support.sweep import budgets, check, cpu_backend

CPU = cpu_backend


@budgets(fast=20)
@pytest.mark.parametrize("path", ["generic", "depthwise"])
def test_conv2d(examples, path):
    check(examples, f"cpu.conv2d.{path}", cases.conv_cases(depthwise=path == "depthwise"), props.conv2d_property(CPU))


@budgets(fast=20)
def test_dense(examples):
    check(examples, "cpu.dense", cases.dense_cases(), props.dense_property(CPU))


@budgets(fast=15)
def test_matmul(examples):
    check(examples, "cpu.matmul", cases.matmul_cases(), props.matmul_property(CPU))


@budgets(fast=15)
@pytest.mark.parametrize("name, op", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply)])
def test_binary(examples, name, op):
    check(examples, f"cpu.{name}", cases.elementwise_cases("binary"), props.binary_property(CPU, name, op))


@budgets(fast=15)
@pytest.mark.parametrize("name", ["relu", "clip", "quantize", "dequantize"])
def test_unary(examples, name):
    check(examples, f"cpu.{name}", cases.elementwise_cases(name), props.unary_property(CPU, name))


@budgets(fast=15)
def test_add_int8(examples):
    check(examples, "cpu.add_int8", cases.elementwise_cases("add_int8"), props.add_int8_property(CPU))


@budgets(fast=15)
def test_batch_norm(examples):
    check(examples, "cpu.batch_norm", cases.batch_norm_cases(), props.batch_norm_property(CPU))


@budgets(fast=15)
def test_softmax(examples):
    check(examples, "cpu.softmax", cases.softmax_cases(), props.softmax_property(CPU))


@budgets(fast=15)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d(examples, kind):
    check(examples, f"cpu.{kind}_pool2d", cases.pool_cases(kind), props.pool_property(CPU, kind))


@budgets(fast=15)
def test_global_avg_pool(examples):
    check(examples, "cpu.global_avg_pool", cases.nchw_cases(("int8", "float32")), props.global_avg_pool_property(CPU))


LAYOUT_CASES = {"transpose": cases.transpose_cases(), "pad": cases.pad_cases(), "concat": cases.concat_cases(),
                "pack_activation": cases.packing_cases(), "unpack_activation": cases.packing_cases()}


@budgets(fast=15)
@pytest.mark.parametrize("name", list(LAYOUT_CASES))
def test_layout(examples, name):
    check(examples, f"cpu.{name}", LAYOUT_CASES[name], props.layout_property(CPU, name))
