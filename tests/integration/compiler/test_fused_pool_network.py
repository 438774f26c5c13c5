"""A network's first conv with its max pool (ResNet's stem on hidden sizes): the pool joins the conv's
accelerator task (graph/fusion.py, lowering/pool.py), the conv stays im2col-packed, and the logits are
the host reference's bits on every device and the same as with the fusion turned off."""

import numpy as np
import pytest

import vtakit
from vtakit.compiler.zoo.builder import GraphBuilder


def _stem(pool_stride: int):
    b = GraphBuilder("stem", seed=4, opset=13)
    x = b.input("data", (1, 3, 29, 27))
    x = b.conv(x, 20, 7, stride=2, pad=3, bias=True, name="c1")
    x = b.relu(x, name="r1")
    x = b.max_pool(x, 3, pool_stride, pad=1, name="pool")
    x = b.conv(x, 24, 3, pad=1, bias=True, name="c2")
    x = b.relu(x, name="r2", out="y")
    return b.model(["y"])


@pytest.fixture(scope="module")
def stems():
    rng = np.random.default_rng(11)
    samples = [rng.standard_normal((1, 3, 29, 27)).astype(np.float32) for _ in range(2)]
    model = _stem(2)
    fused = vtakit.compile(model, "pynq", calibrate=samples)
    apart = vtakit.compile(model, "pynq", calibrate=samples, partition_options={"fuse_pool": False})
    return fused, apart, rng.standard_normal((1, 3, 29, 27)).astype(np.float32)


def test_pool_joins_the_packed_first_conv(stems):
    fused, apart, _ = stems
    tasks = {t.node: t for t in fused.vta_tasks()}
    assert sorted(tasks) == ["c1", "c2"] and sorted(t.node for t in apart.vta_tasks()) == ["c1", "c2", "pool"]
    assert tasks["c1"].acts["data"].packing   # still im2col / space-to-depth packed on the host


def test_fused_pool_network_bits(stems):
    fused, apart, x = stems
    ref = fused.run(x, device="cpu")["y"]
    np.testing.assert_array_equal(apart.run(x, device="cpu")["y"], ref)
    for device in ("fsim", "sim"):
        np.testing.assert_array_equal(fused.run(x, device=device)["y"], ref)
    fused_rows = {r.node: r for r in fused.report().rows}   # the last run: sim
    apart.run(x, device="sim")
    apart_rows = {r.node: r for r in apart.report().rows}
    assert fused_rows["c1"].cycles < apart_rows["c1"].cycles + apart_rows["pool"].cycles
    assert fused_rows["c1"].macs == apart_rows["c1"].macs   # the conv's MACs, not the pooled output's


@pytest.mark.slow
def test_stride_one_pool_network_bits():
    rng = np.random.default_rng(12)
    samples = [rng.standard_normal((1, 3, 29, 27)).astype(np.float32) for _ in range(2)]
    module = vtakit.compile(_stem(1), "pynq", calibrate=samples)
    assert "pool" not in {t.node for t in module.vta_tasks()}
    x = rng.standard_normal((1, 3, 29, 27)).astype(np.float32)
    ref = module.run(x, device="cpu")["y"]
    np.testing.assert_array_equal(module.run(x, device="sim")["y"], ref)
