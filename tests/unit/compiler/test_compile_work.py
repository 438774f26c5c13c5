"""Work and memory of compiling a long graph (issue 37, cause 9: a 200,000-node elementwise chain took
149 s and 13.9 GB).  Counted, never timed: graph runs of the host interpreter, bytes held by calibration,
and the collector's thresholds."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest

from vtakit.errors import CompileError
from onnx import TensorProto, helper, numpy_helper

from vtakit.compiler import gc_budget
from vtakit.compiler.quant import int8
from vtakit.compiler.quant import calibration, quantize
from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.quant.techniques import equalize, range_scale
from vtakit.compiler.quant.calibration import HIST_BINS, Histogram, MethodCalibration
from vtakit.compiler.ops.execute import run_graph


def elementwise_chain(n: int, width: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x -> Relu -> Add(c) -> Mul(s) -> Relu -> ...: no conv or dense anywhere."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        op, out = ("Relu", "Add", "Mul")[i % 3], f"t{i}"
        inputs = [prev]
        if op != "Relu":
            value = rng.integers(-2, 3) / 8 if op == "Add" else 1.0 + rng.integers(-2, 3) / 16
            inits.append(numpy_helper.from_array(np.array([value], np.float32), f"c{i}"))
            inputs.append(f"c{i}")
        nodes.append(helper.make_node(op, inputs, [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def graph_runs(monkeypatch):
    """Counts the host interpreter's whole-graph runs made by calibration, bias correction and range scaling."""
    runs = []

    def counted(*args, **kwargs):
        runs.append(1)
        return run_graph(*args, **kwargs)

    for module in (quantize, equalize, range_scale):
        monkeypatch.setattr(module, "run_graph", counted)
    return runs


def test_a_graph_without_int8_layers_runs_only_for_calibration(graph_runs):
    """Bias correction (no conv/dense to correct) and range scaling (no int8 tensor to fill) cannot change
    such a graph: only calibration runs it, once per sample (it ran 5 times per sample before)."""
    module = compile_module(elementwise_chain(30), "pynq")
    assert len(graph_runs) == int8.SYNTHETIC_SAMPLES
    assert module.notes.calibration.range_scale.groups == 0


def test_range_scaling_without_factors_skips_the_settling_run(graph_runs):
    """A conv network whose groups cannot be scaled (every tensor a graph input/output or read by the host)
    measures its ranges once; the settling run after the bias correction found nothing to settle."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 1, 1)) * 0.5).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    graph = helper.make_graph([conv], "one_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [w])
    module = compile_module(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "pynq")
    assert module.notes.calibration.range_scale.factors == {}
    per_sample = len(graph_runs) / int8.SYNTHETIC_SAMPLES
    assert per_sample == 4  # bias correction twice, range scaling's one measure, calibration (5 before)


def test_calibration_keeps_only_what_its_method_reads():
    """"max" (the default) keeps one float per tensor: no 64 KB histogram (13.9 GB on a 200,000-node chain),
    no squared errors; "mse" its errors, "percentile" / "kl" their histograms."""
    x = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    for method, hist, sse in (("max", False, False), ("search", False, False), ("mse", False, True),
                              ("percentile", True, False), ("kl", True, False)):
        cal = MethodCalibration(method=method)
        cal.observe("t", x)
        assert ("t" in cal.hist, "t" in cal.sse) == (hist, sse), method
        assert cal.amax["t"] == float(np.max(np.abs(x)))


def test_histogram_holds_only_occupied_bins():
    """A 16-value tensor's histogram holds at most 16 bins (was all 8192, 64 KB), with the same counts."""
    x = np.random.default_rng(2).standard_normal(16).astype(np.float32)
    h = Histogram(calibration.ideal_exponent(float(np.max(np.abs(x)))) - 2)
    h.add(x)
    assert h.keys.nbytes + h.tallies.nbytes <= 16 * 10
    mags = np.abs(x.astype(np.float64))
    expected = np.bincount(np.minimum((mags / h.width).astype(np.int64), HIST_BINS - 1), minlength=HIST_BINS)
    assert np.array_equal(h.counts, expected)


def test_histogram_merges_samples_and_widens_exactly():
    """Samples of growing range: the sparse histogram equals the dense count of all of them at the final
    anchor, and clipped fractions agree with counting directly."""
    rng = np.random.default_rng(3)
    parts = [rng.standard_normal(500) * s for s in (0.01, 1.0, 300.0, 0.5)]
    parts[1][::3] = 0.0
    h = Histogram(calibration.ideal_exponent(float(np.max(np.abs(parts[0])))) - 2)
    for p in parts:
        h.add(p)
    mags = np.abs(np.concatenate(parts))
    nonzero = mags[mags != 0]
    expected = np.bincount(np.minimum((nonzero / h.width).astype(np.int64), HIST_BINS - 1), minlength=HIST_BINS)
    assert np.array_equal(h.counts, expected) and h.zeros == mags.size - nonzero.size
    assert list(h.keys) == sorted(set(h.keys)) and np.all(h.tallies > 0)
    for e in range(h.anchor, h.anchor + 4):
        assert h.clipped_fraction(e, nonzero=True) == pytest.approx(
            np.sum(expected[h.edge(e):]) / nonzero.size, abs=0)


def test_a_non_finite_value_fails_only_where_int8_is_asked_of_its_tensor():
    """Calibration observes every tensor; a mask's -inf is no error until an exponent is asked of it (the
    quantizer keeps such tensors float: quant/precision.py keep_out_of_reach), then one line naming it."""
    for method in ("max", "percentile", "mse"):
        cal = MethodCalibration(method=method)
        cal.observe("t", np.array([1.0, np.nan], np.float32))
        with pytest.raises(CompileError, match="tensor 't' reaches inf"):
            cal.exponent("t")


def test_collector_thresholds_raised_during_a_compile_and_restored_after():
    before = gc.get_threshold()
    seen = []
    with gc_budget.fewer_collections():
        seen.append(gc.get_threshold())
        with gc_budget.fewer_collections():  # nested: one setting
            seen.append(gc.get_threshold())
    assert seen[0][0] >= gc_budget.YOUNG_THRESHOLD and seen[1] == seen[0]
    assert gc.get_threshold() == before
    assert compile_module.__wrapped__ is not None  # compile_module runs inside it


def test_made_up_samples_are_the_seeded_normals_and_bounded_in_memory(monkeypatch):
    """The same values as drawing whole float64 arrays; a large declared input gets fewer samples."""
    from vtakit.compiler.ir import Graph, TensorInfo

    g = Graph([], {"x": TensorInfo((2, 3, 5), "float32")}, ["x"], [])
    samples, synthetic = int8.calibration_samples(g, None, seed=3)
    rng = np.random.default_rng(3)
    expected = [rng.standard_normal((2, 3, 5)).astype(np.float32) for _ in range(int8.SYNTHETIC_SAMPLES)]
    assert synthetic and len(samples) == int8.SYNTHETIC_SAMPLES
    assert all(np.array_equal(s["x"], e) for s, e in zip(samples, expected))
    monkeypatch.setattr(int8, "SYNTHETIC_BYTES", 2 * 4 * 30)  # room for two samples of 30 floats
    assert len(int8.calibration_samples(g, None, seed=3)[0]) == 2
    monkeypatch.setattr(int8, "SYNTHETIC_BYTES", 1)
    assert len(int8.calibration_samples(g, None, seed=3)[0]) == 1
