"""The four ways of choosing an activation's power-of-two exponent (compiler.quant.calibration)."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.options import CalibrationMethod
from vtakit.compiler.quant.calibration import KL_CLIPPED, PERCENTILE_CLIPPED, Histogram, MethodCalibration, calibrate
from vtakit.compiler.quant.quantize import Calibration, ideal_exponent
from vtakit.errors import CompileError


def _cal(method: str, *values: np.ndarray) -> MethodCalibration:
    cal = MethodCalibration(method=method)
    for v in values:
        cal.observe("t", v.astype(np.float32))
    return cal


def _heavy_tail(seed: int = 0) -> np.ndarray:
    """Mostly small values and a few far outliers: clipping the outliers buys resolution."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(200_000) * 0.5
    x[:5] = [40.0, -35.0, 38.0, 30.0, -33.0]
    return x


def test_max_clips_nothing():
    x = _heavy_tail()
    e = _cal("max", x).exponent("t")
    assert e == ideal_exponent(float(np.max(np.abs(x))))
    assert np.max(np.abs(np.rint(x * 2.0 ** e))) <= 127


def test_percentile_clips_at_most_its_fraction_and_is_finer_than_max():
    x = _heavy_tail()
    cal = _cal("percentile", x)
    e = cal.exponent("t")
    assert e > _cal("max", x).exponent("t")
    assert np.mean(np.abs(x * 2.0 ** e) > 127.5) <= PERCENTILE_CLIPPED
    assert np.mean(np.abs(x * 2.0 ** (e + 1)) > 127.5) > PERCENTILE_CLIPPED or e + 1 not in cal.candidates("t")


def test_mse_is_the_least_squared_error_choice():
    x = _heavy_tail()
    assert _cal("mse", x).exponent("t") == _cal_plain(x)

    def sse(e):
        return float(np.sum((np.clip(np.rint(x * 2.0 ** e), -128, 127) / 2.0 ** e - x) ** 2))

    cal = _cal("mse", x)
    assert sse(cal.exponent("t")) == min(sse(e) for e in cal.candidates("t"))


def _cal_plain(x: np.ndarray) -> int:
    c = Calibration()
    c.observe("t", x.astype(np.float32))
    return c.exponent("t")


def test_kl_clips_a_heavy_tail_and_keeps_a_uniform_range():
    assert _cal("kl", _heavy_tail()).exponent("t") > _cal("max", _heavy_tail()).exponent("t")
    u = np.random.default_rng(1).uniform(-3.9, 3.9, 100_000)
    assert _cal("kl", u).exponent("t") == _cal("max", u).exponent("t")


def test_kl_ignores_the_spike_of_exact_zeros_a_relu_leaves():
    x = np.clip(np.random.default_rng(4).standard_normal(100_000) * 2, 0, 6)  # half exact zeros
    cal = _cal("kl", x)
    assert cal.hist["t"].zeros == int(np.sum(x == 0))
    assert cal.exponent("t") == _cal("max", x).exponent("t")  # the spike alone would push it 3 bits finer


def test_kl_never_clips_a_narrow_band_whole():
    """Values in a narrow band near their maximum (pooled features): a threshold below them all would fold
    them into one bin, which KL scores 0; such candidates are not taken (KL_CLIPPED)."""
    x = np.random.default_rng(5).uniform(0.85, 1.0, 50_000)
    cal = _cal("kl", x)
    e = cal.exponent("t")
    assert np.mean(np.abs(x * 2.0 ** e) > 127.5) <= KL_CLIPPED
    assert cal.hist["t"].kl_divergence(max(cal.candidates("t"))) == 0.0  # the degenerate score it avoids


def test_histogram_widening_is_exact():
    rng = np.random.default_rng(2)
    small, large = rng.standard_normal(10_000) * 0.1, rng.standard_normal(10_000) * 20
    grown = Histogram(ideal_exponent(float(np.max(np.abs(small)))) - 2)
    grown.add(small)
    grown.add(large)
    direct = Histogram(grown.anchor)
    direct.add(np.concatenate([small, large]))
    assert np.array_equal(grown.counts, direct.counts)
    for e in range(grown.anchor, grown.anchor + 5):
        both = np.concatenate([small, large]).astype(np.float32)
        assert grown.clipped_fraction(e) == pytest.approx(np.mean(np.abs(both) >= 127.5 * 2.0 ** -e))


def test_methods_over_several_samples_and_a_graph():
    from vtakit.compiler.ir import Graph, Node, TensorInfo

    g = Graph([Node("Relu", "r", ["x"], ["y"])], {"x": TensorInfo((1, 4, 8, 8), "float32"),
                                                 "y": TensorInfo((1, 4, 8, 8), "float32")}, ["x"], ["y"])
    rng = np.random.default_rng(3)
    samples = [{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(3)]
    for method in CalibrationMethod.values(concrete=True):
        cal = calibrate(g, samples, method)
        assert cal.samples == 3 and cal.method == method
        assert cal.amax["y"] == max(float(np.max(s["x"])) for s in samples)
        assert cal.exponent("y") in cal.candidates("y")


def test_unknown_method_is_one_clear_error():
    with pytest.raises(CompileError, match="unknown calibration 'entropy'; use one of max, percentile, mse, kl, search"):
        calibrate(None, [], "entropy")
    with pytest.raises(CompileError, match="calibration 'auto' is not a choice here"):  # the recipe search's
        calibrate(None, [], "auto")
