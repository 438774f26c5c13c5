"""ResNet-18's convolution layers (compiler/backends/vta/layers.py) end to end.

The cycle model is deterministic, so utilization targets with the default
schedules are assertions, not benchmarks.  Every layer runs with VTA's benchmark
epilogue (+ bias, >> 8, clip to [0, 127]) via `layer_runs.run_layer`, which
also checks it against the numpy reference.
"""

from __future__ import annotations

import pytest

from vtakit.compiler.backends.vta import layer_runs
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.layers import RESNET18, RESNET18_DENSE
from vtakit.isa.config import HwConfig

PYNQ = HwConfig.preset("pynq")
LAYERS = {layer.name: layer for layer in RESNET18}
OFFLOADED = [layer.name for layer in RESNET18 if layer.name != "C1"]   # C2..C11
THREE_BY_THREE = [n for n in OFFLOADED if LAYERS[n].kernel == 3]
ONE_BY_ONE_STRIDE2 = ["C4", "C7", "C10"]


def _check(row: dict) -> None:
    assert row["correct"], f"{row['name']}: result differs from the reference (schedule {row['schedule']})"


@pytest.mark.parametrize("name", ["C2", "C11", "C4"])
def test_layer_correct_on_cycle_model(name):
    row = layer_runs.run_layer(LAYERS[name], PYNQ, "sim", None, seed=1)
    _check(row)
    assert row["cycles"] > 0 and row["macs"] == LAYERS[name].macs


def test_all_layers_compile():
    """Every layer C1-C11 compiles with its default schedule (no wall-clock assertion)."""
    for layer in RESNET18:
        op, knobs = compile_conv2d(PYNQ, x_shape=(layer.batch, layer.c_in, layer.hw, layer.hw),
                                   w_shape=(layer.c_out, layer.c_in, layer.kernel, layer.kernel),
                                   stride=layer.stride, padding=layer.pad, bias=True, shift=8, clip=(0, 127),
                                   name=layer.name)
        assert op.name == layer.name and len(op.insns) > 0 and len(op.uop_table) > 0
        assert op.tensors["out"].shape[2:] == (layer.out_hw, layer.out_hw)


# --------------------------------------------------- utilization targets
@pytest.fixture(scope="module")
def rows_default():
    return {n: layer_runs.run_layer(LAYERS[n], PYNQ, "sim", None) for n in OFFLOADED}


@pytest.fixture(scope="module")
def rows_vthreads1():
    return {n: layer_runs.run_layer(LAYERS[n], PYNQ, "sim", 1) for n in OFFLOADED}


def test_default_schedules_are_correct(rows_default, rows_vthreads1):
    for row in list(rows_default.values()) + list(rows_vthreads1.values()):
        _check(row)
    assert all(r["schedule"]["vthreads"] == 1 for r in rows_vthreads1.values())


def test_weighted_utilization(rows_default):
    s = layer_runs.summary(list(rows_default.values()), PYNQ)
    assert s["layers"] == 10 and s["all_correct"]
    assert s["total_macs"] == sum(LAYERS[n].macs * LAYERS[n].repeats for n in OFFLOADED)
    assert s["weighted_utilization"] >= 0.80, s


@pytest.mark.parametrize("name", THREE_BY_THREE)
def test_three_by_three_utilization(rows_default, name):
    row = rows_default[name]
    assert row["utilization"] >= 0.70, (name, row["utilization"], row["schedule"])


@pytest.mark.parametrize("name", ONE_BY_ONE_STRIDE2)
def test_one_by_one_stride2_utilization(rows_default, name):
    row = rows_default[name]
    assert LAYERS[name].kernel == 1 and LAYERS[name].stride == 2
    assert row["utilization"] > 0.24, (name, row["utilization"], row["schedule"])


@pytest.mark.parametrize("name", ONE_BY_ONE_STRIDE2)
def test_one_by_one_stride2_is_capped_by_the_epilogue(rows_default, name):
    """Each 16-channel output entry takes icb GEMM micro-ops and at least a reset, SHR, MIN and MAX on the
    compute module (VTA's ISA: one ALU entry a cycle, no clip), so the compute module's own work keeps
    these layers under icb / (icb + 4) whatever the overlap (issue 18's 70 % is out of reach for C4, C7)."""
    row, layer = rows_default[name], LAYERS[name]
    icb = layer.c_in // PYNQ.block_in
    assert row["utilization"] <= row["compute_bound"] < icb / (icb + 4), row
    assert row["compute_bound"] < 0.70 or icb >= 16


def test_virtual_threads_save_cycles(rows_default, rows_vthreads1):
    default_total = layer_runs.summary(list(rows_default.values()), PYNQ)["total_cycles"]
    single_total = layer_runs.summary(list(rows_vthreads1.values()), PYNQ)["total_cycles"]
    assert default_total <= 0.85 * single_total, (default_total, single_total, default_total / single_total)


# -------------------------------------------------------- slow: everything
@pytest.mark.slow
@pytest.mark.parametrize("device", ["fsim", "sim"])
@pytest.mark.parametrize("preset", ["pynq", "1x8"])
@pytest.mark.parametrize("layer", RESNET18 + RESNET18_DENSE, ids=lambda layer: layer.name)
def test_every_layer_correct(layer, preset, device):
    cfg = HwConfig.preset(preset)
    row = layer_runs.run_layer(layer, cfg, device, None, seed=3)
    _check(row)
    assert row["macs"] == layer.macs
    assert (row["cycles"] is None) == (device == "fsim")
