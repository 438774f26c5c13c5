"""`--target cuda` and `--host cuda`: modules record their GPU kernels (PTX generated at compile time), run
through the same executor as the CPU backend (checked here on the emulated GPU), and without a GPU a run
fails with one clear DeviceError."""

import json
import zipfile

import numpy as np
import pytest

import vtakit
from tests.support.gpu_marks import GPU_OK
from vtakit.cli import main
from vtakit.compiler.backends import cuda
from vtakit.compiler import zoo
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.errors import CompileError, DeviceError


def _digits_input(seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(zoo.input_shape("digits_cnn")).astype(np.float32)


@pytest.fixture(scope="module")
def float_module():
    return vtakit.compile(zoo.build("digits_cnn"), target="cuda")


@pytest.fixture(scope="module")
def int8_module():
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(zoo.input_shape("digits_cnn")).astype(np.float32) for _ in range(4)]
    return vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=samples, host="cuda", host_int8=True,
                          partition_options=dict(first_conv="host", classifier="host"))  # int8 kernels on the GPU


def test_cuda_target_records_every_nodes_kernels(float_module, tmp_path):
    gpu = float_module.notes.gpu
    assert float_module.target == "cuda" and float_module.host == "cuda" and gpu["arch"] == "sm_80"
    assert set(gpu["kernels"]) == {n.name for n in float_module.graph.nodes}
    kinds = {n.op: [k["kernel"] for k in gpu["kernels"][n.name]] for n in float_module.graph.nodes}
    assert kinds["Conv"] == ["conv2d", "ew_clip"] and kinds["MaxPool"] == ["max_pool2d"]
    assert kinds["Dense"] == ["dense"] and kinds["Flatten"] == []
    conv = gpu["kernels"]["conv1"][0]
    assert conv["block"] == [16, 16, 1] and conv["shared_bytes"] > 0 and len(conv["ptx_sha256"]) == 64
    loaded = CompiledModule.load(float_module.save(tmp_path / "m.vtamod"))
    assert loaded.target == "cuda" and loaded.host == "cuda" and loaded.notes.gpu == json.loads(
        json.dumps(gpu))


def test_cuda_target_on_the_emulated_gpu_matches_the_cpu_backend(float_module):
    x = _digits_input()
    want = float_module.run(x, device="cpu")["logits"]
    got = float_module.run(x, host=cuda.Emulator())["logits"]
    assert float_module.last_run.device == "emulator"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_host_cuda_records_only_the_host_tasks(int8_module):
    gpu = int8_module.notes.gpu
    host_tasks = [t for t in int8_module.tasks if isinstance(t, str)]
    assert int8_module.host == "cuda" and set(gpu["kernels"]) == set(host_tasks)
    assert len(int8_module.vta_tasks()) > 0
    kernels = {k["kernel"] for records in gpu["kernels"].values() for k in records}
    assert {"conv2d", "dense", "ew_quantize"} <= kernels  # first conv and classifier stay on the host (GPU)


def test_int8_module_on_the_emulated_gpu_is_bit_exact(int8_module):
    """Every node (QConv, QDense, pooling, quantize ...) on the GPU gives the CPU backend's bits; with the
    accelerator on the functional simulator, host tasks on the GPU give the same bits as on the CPU."""
    x = _digits_input(5)
    emulator = cuda.Emulator()
    reference = int8_module.run(x, device="cpu")["logits"]
    assert np.array_equal(int8_module.run(x, device="cuda", host=emulator)["logits"], reference)
    on_fsim = int8_module.run(x, device="fsim", host="cpu")["logits"]
    assert np.array_equal(int8_module.run(x, device="fsim", host=emulator)["logits"], on_fsim)
    assert int8_module.last_run.device == "fsim (host tasks on emulator)"
    places = {t.place for t in int8_module.last_run.tasks}
    assert places == {"vta", "host"}


@pytest.mark.skipif(GPU_OK, reason="a GPU is present: runs succeed")
def test_without_a_gpu_runs_fail_with_one_clear_error(float_module, int8_module):
    x = _digits_input()
    for module, device in ((float_module, "sim"), (int8_module, "fsim"), (int8_module, "cuda")):
        with pytest.raises(DeviceError, match=r"^cannot run on the GPU: cuInit failed: ") as info:
            module.run(x, device=device)
        assert "\n" not in str(info.value)
    assert float_module.run(x, device="cpu")["logits"].shape == (1, 10)  # the CPU still runs it


def test_option_errors():
    with pytest.raises(CompileError, match="unknown host 'gpu'"):
        vtakit.compile(zoo.build("digits_cnn"), host="gpu")
    with pytest.raises(CompileError, match="use target cuda for the GPU"):
        vtakit.compile(zoo.build("digits_cnn"), target="cpu", host="cuda")


def test_cli_compile_and_run(tmp_path, capsys):
    model = tmp_path / "digits.onnx"
    zoo.save("digits_cnn", model)
    x = tmp_path / "x.npy"
    np.save(x, _digits_input())
    cuda_mod = tmp_path / "cuda.vtamod"
    assert main(["compile", str(model), "--target", "cuda", "-o", str(cuda_mod)]) == 0
    out = capsys.readouterr().out
    assert "GPU: " in out and "PTX kernels for sm_80" in out
    with zipfile.ZipFile(cuda_mod) as archive:
        manifest = json.loads(np.load(archive.open("manifest.npy")).tobytes())
    assert manifest["target"] == "cuda" and manifest["host"] == "cuda" and manifest["notes"]["gpu"]["kernels"]
    mixed = tmp_path / "mixed.vtamod"
    assert main(["compile", str(model), "--host", "cuda", "-o", str(mixed)]) == 0
    assert CompiledModule.load(mixed).host == "cuda"
    assert main(["run", str(cuda_mod), "--input", str(x), "--device", "cpu"]) == 0
    if not GPU_OK:
        capsys.readouterr()
        assert main(["run", str(cuda_mod), "--input", str(x), "--device", "cuda"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: cannot run on the GPU: cuInit failed") and "\n" not in err


def test_generic_ops_compile_for_cuda_and_run_on_the_emulated_gpu(emulator):
    """Ops without GPU code (LRN in numpy, Hardmax and ReduceMean through onnx.reference) launch nothing
    and run on host copies; Sum and a batch norm that folds into no conv (constant statistics, read on
    the host) launch GPU kernels; the result is the CPU backend's."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    c = numpy_helper.from_array
    stats = [c(rng.uniform(0.5, 1.5, 4).astype(np.float32), n) for n in ("s", "b", "m", "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LRN", ["c"], ["l"], size=3),
             helper.make_node("Sum", ["c", "l", "c"], ["s1"]), helper.make_node("Hardmax", ["s1"], ["h"], axis=1),
             helper.make_node("Add", ["h", "s1"], ["a"]),
             helper.make_node("BatchNormalization", ["a", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Resize", ["bn", "", "sc"], ["r"], mode="nearest"),
             helper.make_node("ReduceMean", ["r"], ["y"], axes=[2, 3], keepdims=0)]
    inits = [c(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"), c(np.array([1, 1, 2, 2], np.float32), "sc")]
    graph = helper.make_graph(nodes, "generic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits + stats)
    module = vtakit.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), target="cuda")
    launches = {n.op: len(module.notes.gpu["kernels"][n.name]) for n in module.graph.nodes}
    assert launches["LRN"] == launches["Hardmax"] == launches["ReduceMean"] == 0
    assert launches["Conv"] > 0 and launches["BatchNormalization"] > 0
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    want = module.run({"x": x}, device="cpu")["y"]
    np.testing.assert_allclose(module.run({"x": x}, host=emulator)["y"], want, rtol=1e-5, atol=1e-5)
    assert module.last_run.device == "emulator"
