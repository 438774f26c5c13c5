"""What the GPU check (benchmarks/gpu_check.sh) relies on, checked without a GPU: a failing check keeps its
arrays for replay here, and the network benchmark's batch-32 int8 run (a batch-1 int8 graph on a batch)
computes exactly what single-image runs compute."""

import numpy as np
import pytest

import vtakit
from benchmarks.gpu_networks import max_relative_error, rebatched
from tests.support.gpu_marks import FAILURES_ENV, keep_on_failure
from vtakit.compiler import zoo


def test_a_failing_check_keeps_its_arrays_and_the_error(tmp_path, monkeypatch):
    monkeypatch.setenv(FAILURES_ENV, str(tmp_path / "kept"))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(AssertionError, match="differs"):
        with keep_on_failure("conv2d 3x3/2 [b=1]", x=x, options=dict(pads=(1, 1, 1, 1))) as kept:
            kept["got"] = x + 1
            raise AssertionError("differs")
    saved = np.load(tmp_path / "kept" / "conv2d_3x3_2_b_1_.npz")
    assert np.array_equal(saved["x"], x) and np.array_equal(saved["got"], x + 1)
    assert str(saved["options"]) == "{'pads': (1, 1, 1, 1)}"
    assert str(saved["error"]) == "AssertionError: differs"


def test_a_passing_check_or_no_folder_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(FAILURES_ENV, str(tmp_path / "kept"))
    with keep_on_failure("fine", x=np.zeros(2)):
        pass
    assert not (tmp_path / "kept").exists()
    monkeypatch.delenv(FAILURES_ENV)
    with pytest.raises(ValueError):
        with keep_on_failure("no folder", x=np.zeros(2)):
            raise ValueError("bad")
    assert not (tmp_path / "kept").exists()


def test_a_rebatched_int8_graph_equals_single_image_runs():
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(zoo.input_shape("digits_cnn")).astype(np.float32) for _ in range(2)]
    module = vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=samples)
    x = rng.standard_normal(zoo.input_shape("digits_cnn", 5)).astype(np.float32)
    batched = rebatched(module, 5).run(x, device="cpu")
    for name, value in batched.items():
        singles = np.concatenate([module.run(x[i:i + 1], device="cpu")[name] for i in range(5)])
        assert value.shape[0] == 5 and np.array_equal(value, singles)
        assert max_relative_error(value, singles) == 0.0
    assert module.graph.tensors[module.graph.inputs[0]].shape[0] == 1  # the module itself is untouched


def test_a_graph_whose_shapes_name_the_batch_is_not_rebatched():
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(zoo.input_shape("small_cnn")).astype(np.float32)]
    module = vtakit.compile(zoo.build("small_cnn"), "pynq", calibrate=samples)
    with pytest.raises(ValueError, match="cannot rebatch a graph with Reshape"):
        rebatched(module, 4)
