"""Reduction packing inside a network: the conv whose data the host writes runs packed (the host
lays its input out as im2col / space-to-depth when it writes it: no extra crossing), a conv fed by
the accelerator does not, and every device gives the host reference's bits."""

import numpy as np
import pytest

import vtakit
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.backends.vta.packing import ReductionPacking
from vtakit.compiler.zoo.builder import GraphBuilder


@pytest.fixture(scope="module")
def packed_net():
    """3 -> 20 channels 7x7/2 on an odd 29x29 image (hidden sizes), then an accelerator-fed conv."""
    b = GraphBuilder("packed_net", seed=3, opset=13)
    x = b.input("data", (1, 3, 29, 29))
    x = b.conv(x, 20, 7, stride=2, pad=3, bias=True, name="c1")
    x = b.relu(x, name="r1")
    x = b.conv(x, 24, 3, pad=1, bias=True, name="c2")
    x = b.relu(x, name="r2", out="y")
    model = b.model(["y"])
    rng = np.random.default_rng(7)
    samples = [rng.standard_normal((1, 3, 29, 29)).astype(np.float32) for _ in range(3)]
    module = vtakit.compile(model, "pynq", calibrate=samples)
    return module, rng.standard_normal((1, 3, 29, 29)).astype(np.float32)


def test_host_fed_conv_is_packed_and_the_rest_is_not(packed_net):
    module, _ = packed_net
    tasks = {t.node: t for t in module.vta_tasks()}
    first = [t for t in tasks.values() if t.acts["data"].packing]
    assert len(first) == 1 and len(tasks) == 2
    pk = ReductionPacking.from_spec(first[0].acts["data"].packing)
    assert pk.kind in ("im2col", "space_to_depth") and pk.original.x_shape == (1, 3, 29, 29)
    assert pk.bias_lanes >= 2 and pk.packed.x_shape[1] % 16 == 0            # the bias rides in idle lanes
    assert "bias" not in first[0].bind


def test_packed_network_bits_match_the_host_reference(packed_net, tmp_path):
    module, x = packed_net
    ref = module.run(x, device="cpu")["y"]
    for device in ("fsim", "sim"):
        np.testing.assert_array_equal(module.run(x, device=device)["y"], ref)
    loaded = CompiledModule.load(module.save(tmp_path / "p.vtamod"))
    np.testing.assert_array_equal(loaded.run(x, device="sim")["y"], ref)
    assert loaded.plan.slots == module.plan.slots


def test_packing_spec_round_trips():
    from vtakit.compiler.backends.vta.packing import ConvGeometry, packing, with_bias_lanes
    from vtakit.isa.config import HwConfig

    g = ConvGeometry((1, 3, 29, 29), (20, 3, 7, 7), 2, 3)
    for p in (packing("im2col", g), packing("space_to_depth", g),
              with_bias_lanes(HwConfig.preset("pynq"), packing("im2col", g), np.arange(20, dtype=np.int32))):
        assert ReductionPacking.from_spec(p.to_spec()) == p
    with pytest.raises(vtakit.errors.CompileError, match="bad reduction packing spec"):
        ReductionPacking.from_spec("im2col/1,2")
