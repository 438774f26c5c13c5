"""Mobile-network blocks on the accelerator: a stride-2 "same" stem (asymmetric pads, packed on the host),
5x5 depthwise convolutions (block-diagonal GEMMs, where the cycle model beats the host round trip) with
per-channel shifts, the bias added by GEMM and ReLU6 as a clip, with no host round trip between them; bit-identical on the host int8 reference, fsim and the cycle model."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.backends.vta.lowering import ONES
from vtakit.isa.opcodes import MemId

RNG = np.random.default_rng(616)
SHAPE = (1, 3, 65, 65)


def _w(shape, spread: int) -> np.ndarray:
    """Weights whose output channels differ in range by up to 2**spread (per-channel exponents pay)."""
    gains = 2.0 ** -RNG.integers(0, spread + 1, shape[0])
    return (RNG.standard_normal(shape) * 0.3 * gains.reshape(-1, 1, 1, 1)).astype(np.float32)


def _model() -> onnx.ModelProto:
    inits = {"w0": _w((24, 3, 3, 3), 3), "b0": (RNG.standard_normal(24) * 0.1).astype(np.float32),
             "wd1": _w((24, 1, 5, 5), 6), "bd1": (RNG.standard_normal(24) * 0.1).astype(np.float32),
             "w2": _w((40, 24, 1, 1), 2), "wd3": _w((40, 1, 5, 5), 6), "w4": _w((20, 40, 1, 1), 2),
             "wf": (RNG.standard_normal((10, 20)) * 0.3).astype(np.float32),
             "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Clip", ["c0", "lo", "hi"], ["r0"]),
             helper.make_node("Conv", ["r0", "wd1", "bd1"], ["d1"], pads=[2, 2, 2, 2], group=24),
             helper.make_node("Clip", ["d1", "lo", "hi"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
             helper.make_node("Conv", ["r2", "wd3"], ["d3"], strides=[2, 2], pads=[1, 1, 2, 2], group=40),
             helper.make_node("Clip", ["d3", "lo", "hi"], ["r3"]),
             helper.make_node("Conv", ["r3", "w4"], ["c4"]),
             helper.make_node("GlobalAveragePool", ["c4"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "mobile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def compiled():
    model = _model()
    samples = [RNG.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(4)]
    return model, vtakit.compile(model, "pynq", calibrate=samples)


def test_every_conv_runs_on_the_accelerator_without_round_trips(compiled):
    _, module = compiled
    convs = [n for n in module.graph.nodes if n.op == "QConv"]
    on_vta = {t.node for t in module.vta_tasks()}
    assert len(convs) == 5 and all(n.name in on_vta for n in convs), module.graph.notes["host_reasons"]
    depthwise = [n for n in convs if n.attrs["group"] > 1]
    assert len(depthwise) == 2 and any(isinstance(n.attrs["shift"], tuple) for n in depthwise)
    assert all(n.attrs["clip"][0] == 0 for n in depthwise)              # ReLU6 is the epilogue's clip
    assert convs[0].attrs["pads"] == (0, 0, 1, 1) and depthwise[1].attrs["pads"] == (1, 1, 2, 2)
    tasks = {t.node: t for t in module.vta_tasks()}
    biased = tasks[depthwise[0].name].program.tensors          # its bias by GEMM: digit blocks in WGT, `ones`
    assert len(depthwise[0].inputs) > 2 and biased["bias"].mem == MemId.WGT and ONES in biased
    module.run(RNG.uniform(-1, 1, SHAPE).astype(np.float32), device="sim")
    places = [t.place for t in module.last_run.tasks]
    first = places.index("vta")                  # after the host's input scaling (range_scale) and Quantize
    assert places[first:first + 5] == ["vta"] * 5                         # the five convs back to back
    # the input in, the features out to the host's average pool, the classifier's input in and logits out
    assert module.last_run.border_transfers == 4


def test_bit_identical_on_host_fsim_and_cycle_model_and_close_to_float(compiled, tmp_path):
    model, module = compiled
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.uniform(-1, 1, SHAPE).astype(np.float32)
    ref = module.run(x, device="cpu")["y"]
    assert np.array_equal(module.run(x, device="fsim")["y"], ref)
    assert np.array_equal(module.run(x, device="sim")["y"], ref)
    loaded = CompiledModule.load(module.save(tmp_path / "mobile.vtamod"))   # depthwise tasks saved as programs
    assert np.array_equal(loaded.run(x, device="sim")["y"], ref)
    want = sess.run(None, {"x": x})[0]
    cos = float(ref.ravel() @ want.ravel() / np.linalg.norm(ref) / np.linalg.norm(want))
    assert cos > 0.98, cos
    assert module.last_run.accelerator_cycles > 0
