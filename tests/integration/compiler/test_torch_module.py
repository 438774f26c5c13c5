"""A PyTorch user's path: vtakit.compile(module, example_inputs=...) exports with torch's default exporter."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit

torch = pytest.importorskip("torch", reason="torch is the optional 'torch' extra (make test-slow installs it)")
pytestmark = pytest.mark.slow


class _Net(torch.nn.Module):
    """A conv, batch norm, SiLU, residual add, pooling and a Linear head: a small mobile block."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, image):
        x = torch.nn.functional.silu(self.bn(self.conv(image)))
        x = x + torch.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


def test_a_module_compiles_as_its_default_export_and_matches_torch(tmp_path):
    torch.manual_seed(0)
    net = _Net().train()
    rng = np.random.default_rng(0)
    cal = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    module = vtakit.compile(net, "pynq", calibrate=cal, example_inputs=cal[0])
    assert net.training  # its mode is given back
    float_module = vtakit.compile(net, target="cpu", example_inputs=torch.from_numpy(cal[0]))
    assert float_module.graph.inputs == ["image"]  # the forward's parameter name
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        want = net.eval()(torch.from_numpy(x)).numpy()
    got = float_module.run(x, device="cpu")
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-4, atol=1e-5)
    assert len(module.vta_tasks()) >= 2
    y = next(iter(module.run(x, device="sim").values()))
    assert float(y.ravel() @ want.ravel() / np.linalg.norm(y) / np.linalg.norm(want)) > 0.98


def test_a_module_without_example_inputs_and_inputs_for_an_onnx_model_are_one_error_line():
    with pytest.raises(vtakit.CompileError, match="needs example_inputs"):
        vtakit.compile(_Net(), target="cpu")
    from vtakit.compiler import zoo

    with pytest.raises(vtakit.CompileError, match="example_inputs are for a torch.nn.Module"):
        vtakit.compile(zoo.build("digits_cnn"), target="cpu", example_inputs=np.zeros((1, 1, 8, 8), np.float32))
