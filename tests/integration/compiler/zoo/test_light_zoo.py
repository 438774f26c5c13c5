"""The onnx package's light model-zoo architectures (opset 9, IR 3, weights made by ConstantOfShape,
Sum/Dropout/LRN/Unsqueeze/BatchNormalization...) compile on target cpu and match onnxruntime.

Two in the default suite, all nine under `make test-slow`."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit
from tests.support import light_models as L

pytestmark = pytest.mark.skipif(not L.available(), reason="onnx ships no light model-zoo files")

DEFAULT = ("squeezenet", "inception_v1")


def _check_cpu(name: str) -> None:
    model = L.load(name)
    inp, shape = L.data_input(model)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ref = L.onnxruntime_logits(model, x)
    module = vtakit.compile(model, target="cpu")
    (y,) = module.run({inp: x}, device="cpu").values()
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3 * float(np.max(np.abs(ref))))


@pytest.mark.parametrize("name", DEFAULT)
def test_light_zoo_cpu_matches_onnxruntime(name):
    _check_cpu(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in L.NAMES if n not in DEFAULT])
def test_light_zoo_cpu_matches_onnxruntime_all(name):
    _check_cpu(name)


INT8 = ("resnet50", "vgg19", "squeezenet", "inception_v1", "densenet121")


@pytest.mark.slow
@pytest.mark.parametrize("name", INT8)
def test_light_zoo_int8_on_the_cycle_model_tracks_the_float_logits(name):
    """pynq, calibrated on four seeded inputs, run on the cycle model: logits cosine >= 0.99 to float."""
    model = L.load(name)
    inp, shape = L.data_input(model)
    rng = np.random.default_rng(1)
    cal = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    ref = L.onnxruntime_logits(model, x).reshape(-1)
    module = vtakit.compile(model, "pynq", calibrate=cal)
    (y,) = module.run({inp: x}, device="sim").values()
    y = y.reshape(-1)
    assert module.last_run.accelerator_cycles > 0
    assert float(np.dot(y, ref) / np.linalg.norm(y) / np.linalg.norm(ref)) >= 0.99


@pytest.mark.slow
@pytest.mark.parametrize("name", L.NAMES)
def test_light_zoo_compiles_for_cuda(name):
    """Every node's GPU launches are recorded at compile time (PTX generated); LRN, which has no GPU code,
    launches nothing and runs on host copies."""
    module = vtakit.compile(L.load(name), target="cuda")
    kernels = module.notes.gpu["kernels"]
    assert set(kernels) == {n.name for n in module.graph.nodes} and module.notes.gpu["ptx_kernels"] > 0
    assert all(kernels[n.name] for n in module.graph.nodes if n.op == "Conv")
    assert not any(kernels[n.name] for n in module.graph.nodes if n.op == "LRN")
