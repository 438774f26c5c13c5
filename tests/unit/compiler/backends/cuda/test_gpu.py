"""On a real GPU (skipped, with the reason, where there is none): kernels at zoo shapes and every zoo model
against the CPU backend, int8 bit for bit and float32 within tolerance.  A failing check keeps its arrays
(tests.support.gpu_marks.keep_on_failure) and the measured float errors go to the JUnit report."""

import numpy as np
import pytest

import vtakit
from tests.support.gpu_marks import keep_on_failure, needs_gpu
from vtakit.compiler.backends import cpu, cuda
from vtakit.compiler import zoo

pytestmark = needs_gpu


def _close(got, want, rtol=1e-4) -> float:
    """Checks got against want; returns the largest error relative to want's largest magnitude."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)
    return float(np.abs(np.asarray(got, np.float64) - want).max() / scale)


def _input(name: str, seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(zoo.input_shape(name)).astype(np.float32)


KERNELS = [
    ("conv2d 7x7/2", lambda r: ((r.standard_normal((1, 3, 224, 224)), r.standard_normal((64, 3, 7, 7))),
                                dict(stride=2, pads=(3, 3, 3, 3))), "conv2d"),
    ("conv2d 3x3", lambda r: ((r.standard_normal((1, 64, 56, 56)), r.standard_normal((64, 64, 3, 3))),
                              dict(pads=(1, 1, 1, 1))), "conv2d"),
    ("depthwise 3x3", lambda r: ((r.standard_normal((1, 32, 112, 112)), r.standard_normal((32, 1, 3, 3))),
                                 dict(pads=(1, 1, 1, 1), groups=32)), "conv2d"),
    ("dense", lambda r: ((r.standard_normal((1, 512)), r.standard_normal((1000, 512))), {}), "dense"),
    ("max pool", lambda r: ((r.standard_normal((1, 64, 112, 112)),), dict(kernel=3, stride=2, pads=1)),
     "max_pool2d"),
    ("global avg pool", lambda r: ((r.standard_normal((1, 512, 7, 7)),), {}), "global_avg_pool"),
    ("softmax", lambda r: ((r.standard_normal((1, 1000)),), {}), "softmax"),
    ("transpose", lambda r: ((r.standard_normal((1, 64, 56, 56)), (0, 2, 3, 1)), {}), "transpose"),
]


@pytest.mark.parametrize("name, make, function", KERNELS, ids=[k[0] for k in KERNELS])
def test_float_kernels_match_the_cpu_backend(name, make, function, record_property):
    args, options = make(np.random.default_rng(0))
    args = [a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args]
    operands = {f"arg{i}": a for i, a in enumerate(args)}
    with keep_on_failure(f"kernel {name}", function=function, options=options, **operands) as kept:
        kept["want"] = getattr(cpu, function)(*args, **options)
        kept["got"] = getattr(cuda, function)(*args, **options)
        record_property("max_error", _close(kept["got"], kept["want"]))


def test_int8_kernels_are_bit_exact():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (1, 64, 56, 56)).astype(np.int8)
    w = rng.integers(-128, 128, (64, 64, 3, 3)).astype(np.int8)
    b = rng.integers(-5000, 5000, 64).astype(np.int32)
    v = rng.integers(-128, 128, (4, 512)).astype(np.int8)
    m = rng.integers(-128, 128, (1000, 512)).astype(np.int8)
    checks = [("conv2d", (x, w, b), dict(pads=(1, 1, 1, 1))),
              ("conv2d", (x, w, b), dict(pads=(1, 1, 1, 1), shift=9, clip=(0, 127))),
              ("dense", (v, m), dict(shift=7)), ("max_pool2d", (x,), dict(kernel=3, stride=2, pads=1)),
              ("global_avg_pool", (x,), {}), ("add_int8", (x, x[:, ::-1]), dict(shift=1))]
    for i, (function, args, options) in enumerate(checks):
        operands = {f"arg{j}": a for j, a in enumerate(args)}
        with keep_on_failure(f"int8 {i} {function}", function=function, options=options, **operands) as kept:
            kept["want"] = getattr(cpu, function)(*args, **options)
            kept["got"] = getattr(cuda, function)(*args, **options)
            assert np.array_equal(kept["got"], kept["want"]), (function, options)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_float_model_on_the_gpu_matches_the_cpu_backend(name, record_property):
    x = _input(name)
    with keep_on_failure(f"float model {name}", x=x) as kept:
        want = vtakit.compile(zoo.build(name), target="cpu").run(x)
        module = vtakit.compile(zoo.build(name), target="cuda")
        got = module.run(x)
        kept.update({f"want_{k}": v for k, v in want.items()} | {f"got_{k}": v for k, v in got.items()})
        assert module.last_run.device == "cuda"
        record_property("max_error", max(_close(got[key], want[key], rtol=1e-3) for key in want))


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_int8_model_on_the_gpu_is_bit_exact(name):
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(zoo.input_shape(name)).astype(np.float32) for _ in range(2)]
    module = vtakit.compile(zoo.build(name), "pynq", calibrate=samples, host="cuda")
    x = _input(name, 3)
    with keep_on_failure(f"int8 model {name}", x=x, calibration=np.stack(samples)) as kept:
        reference = module.run(x, device="cpu")
        on_gpu = module.run(x, device="cuda")
        kept.update({f"want_{k}": v for k, v in reference.items()} | {f"got_{k}": v for k, v in on_gpu.items()})
        for key in reference:
            assert np.array_equal(on_gpu[key], reference[key]), key


def test_host_tasks_on_the_gpu_beside_the_accelerator():
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(zoo.input_shape("small_cnn")).astype(np.float32) for _ in range(2)]
    module = vtakit.compile(zoo.build("small_cnn"), "pynq", calibrate=samples, host="cuda")
    x = _input("small_cnn")
    on_cpu_host = module.run(x, device="fsim", host="cpu")["probs"]
    assert np.array_equal(module.run(x, device="fsim")["probs"], on_cpu_host)
    assert module.last_run.device == "fsim (host tasks on cuda)"


def test_device_memory_is_reused_across_runs():
    module = vtakit.compile(zoo.build("small_cnn"), target="cuda")
    x = _input("small_cnn")
    module.run(x)
    held = cuda.default_gpu().pool.allocated_bytes
    for _ in range(3):
        module.run(x)
    assert cuda.default_gpu().pool.allocated_bytes == held
