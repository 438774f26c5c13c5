"""A compiled module's host tasks on the numpy fallback: the same outputs as on the native kernels (bit for
bit where the network ends in int8 arithmetic; a float softmax within 1e-5), and the report names them."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.backends import cpu
from vtakit.compiler.ops.execute import run_graph

pytestmark = pytest.mark.skipif(cpu.native is None, reason="llvmlite is not installed: no native kernels to compare")


def _compiled(name: str):
    model = zoo.build(name)
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(3)
    samples = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    return vtakit.compile(model, "pynq", calibrate=samples[:2]), samples[2]


@pytest.fixture
def on():
    """cpu.select(choice) for the test; the default choice again afterwards."""
    yield cpu.select
    cpu.select()


@pytest.mark.parametrize("name", ["digits_cnn", "small_cnn"])
def test_every_integer_tensor_is_bit_identical(on, name):
    module, x = _compiled(name)
    g = module.graph
    values = {}
    for choice in ("native", "numpy"):
        on(choice)
        values[choice] = (module.run(x, device="cpu"), module.run(x, device="fsim"),
                          run_graph(g, {g.inputs[0]: x}, keep=True))
    (native_cpu, native_fsim, native_all), (numpy_cpu, numpy_fsim, numpy_all) = values["native"], values["numpy"]
    integer = [t for t, v in native_all.items() if v.dtype.kind in "iu"]
    assert len(integer) > 5
    for t in integer:
        np.testing.assert_array_equal(numpy_all[t], native_all[t], err_msg=t)
    for native_out, numpy_out in ((native_cpu, numpy_cpu), (native_fsim, numpy_fsim)):
        for k, v in native_out.items():
            if g.nodes[-1].op == "Softmax":   # a float exp: the native kernel's polynomial vs numpy's
                np.testing.assert_allclose(numpy_out[k], v, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(numpy_out[k], v)


def test_the_report_names_the_host_kernels(on):
    module, x = _compiled("digits_cnn")
    on("numpy")
    module.run(x, device="fsim")
    report = module.report()
    assert report.host_kernels == "numpy fallback" and report.to_dict()["host_kernels"] == "numpy fallback"
    assert "host kernels: numpy fallback" in report.summary_lines()[1]
    on("native")
    module.run(x, device="cpu")
    assert "host kernels: native (llvmlite JIT)" in module.report().summary_lines()[1]
