"""Quantized models in (compiler/quant/qdq.py): ONNX Runtime QDQ models keep their scales."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.support.qdq_models import ort_qdq, ort_run, power_of_two, qlinear_conv_model
from vtakit.compiler.pipeline import compile_module, optimize
from vtakit.compiler.quant.calibration import calibrate
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.quant.qdq import scale_exponent
from vtakit.compiler.zoo import digits_cnn, digits_data
from vtakit.errors import CompileError

pytest.importorskip("onnxruntime.quantization")
pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The trained digits CNN, its ORT QDQ models (per-tensor; per-channel; per-channel moved to
    powers of two; uint8 asymmetric) and data."""
    xtr, _, xte, _ = digits_data()
    cal = [{"data": xtr[i: i + 1]} for i in range(16)]
    fm, tmp = digits_cnn(batch=1), tmp_path_factory.mktemp("qdq")
    pc = ort_qdq(fm, tmp / "pc.onnx", cal, per_channel=True)
    return dict(cal=[c["data"] for c in cal], x=xte[:6], pc=pc, pow2=power_of_two(pc),
                pt=ort_qdq(fm, tmp / "pt.onnx", cal, per_channel=False),
                u8=ort_qdq(fm, tmp / "u8.onnx", cal, per_channel=False, uint8=True))


def _inits(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


def test_scale_exponent_exact_and_coarser():
    assert scale_exponent(2.0 ** -7, "n", "QuantizeLinear").exp == 7
    assert scale_exponent(2.0 ** -7, "n", "QuantizeLinear").exact
    e = scale_exponent(0.0069, "n", "QuantizeLinear")  # between 2**-8 and 2**-7: the coarser, never clips
    assert e.exp == 7 and 1.0 < e.ratio < 2.0 and math.isclose(e.ratio, 2.0 ** -7 / 0.0069)
    with pytest.raises(CompileError, match="node 'q'.*not a finite positive"):
        scale_exponent(0.0, "q", "QuantizeLinear")


def test_power_of_two_model_keeps_its_int8_values(digits):
    """Every scale a power of two: the compiled exponents are the model's, the int8 weights are the
    model's own bit for bit, activations match onnxruntime's int8 tensors to 1 LSB (rounding ties)."""
    m = digits["pow2"]
    mod = compile_module(m, "pynq", calibrate=digits["cal"])
    inits, g = _inits(m), mod.graph
    note = mod.notes.calibration.qdq
    assert note.exact and note.weights == ("conv1", "conv2", "conv3", "fc") and note.notes == ()
    for t in ("data", "relu1", "relu3"):
        assert g.tensors[f"{t}.q"].exp == -math.log2(float(inits[f"{t}_scale"]))
    conv1 = next(n for n in g.nodes if n.name == "conv1")
    assert np.array_equal(g.consts[conv1.inputs[1]], inits["conv1.weight_quantized"])
    assert conv1.attrs["weight_exp"] == tuple(int(-math.log2(s)) for s in inits["conv1.weight_scale"]) \
        or conv1.attrs["weight_exp"] == int(-math.log2(inits["conv1.weight_scale"][0]))
    seen: dict[str, np.ndarray] = {}
    x = digits["x"][:1]
    run_graph(g, {"data": x}, observer=seen.__setitem__)
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.append(onnx.helper.make_value_info("relu1_QuantizeLinear_Output", onnx.TypeProto()))
    import onnxruntime as ort

    plain = ort.SessionOptions()  # the QDQ graph as written: ORT's fusions change its rounding
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), plain, providers=["CPUExecutionProvider"])
    ref = sess.run(["relu1_QuantizeLinear_Output"], {"data": x})[0].astype(np.int32)
    diff = np.abs(seen["relu1.q"].astype(np.int32) - ref)
    assert diff.max() <= 1 and np.mean(diff) < 0.01
    logits = mod.run(x, device="sim")["logits"]
    assert np.array_equal(logits, mod.run(x, device="cpu")["logits"])
    assert logits.argmax() == ort_run(m, x).argmax()


def test_a_config_with_mul_keeps_the_model_weights_too(digits):
    """pynq_mul requantizes with multipliers (graph/fixed_point.py) except where a QDQ model brings its own
    weight scales: those layers keep the model's int8 weights bit for bit."""
    m = digits["pow2"]
    mod = compile_module(m, "pynq_mul", calibrate=digits["cal"])
    conv1 = next(n for n in mod.graph.nodes if n.name == "conv1")
    assert "multiplier" not in conv1.attrs
    assert np.array_equal(mod.graph.consts[conv1.inputs[1]], _inits(m)["conv1.weight_quantized"])
    x = digits["x"][:1]
    assert np.array_equal(mod.run(x, device="sim")["logits"], mod.run(x, device="cpu")["logits"])


def test_per_channel_scales_map_to_channel_shifts_with_notes(digits):
    """Without range scaling every scale moves up to its power of two (the activations' grid up to 2x the model's)."""
    mod = compile_module(digits["pc"], "pynq", calibrate=digits["cal"], range_scale="off")
    inits, g = _inits(digits["pc"]), mod.graph
    conv1 = next(n for n in g.nodes if n.name == "conv1")
    want = [math.floor(-math.log2(float(s))) for s in inits["conv1.weight_scale"]]
    assert list(conv1.attrs["weight_exp"]) == want  # the coarser power of two of every channel's scale
    assert g.tensors["relu1.q"].exp == math.floor(-math.log2(float(inits["relu1_scale"])))
    note = mod.notes.calibration.qdq
    assert not note.exact and any("relu1: scale is not a power of two" in s for s in note.notes)
    assert any(s.startswith("conv1.weight_DequantizeLinear:") for s in note.notes)
    for x in digits["x"][:3]:
        a = mod.run(x[None], device="fsim")["logits"]
        assert np.array_equal(a, mod.run(x[None], device="cpu")["logits"])
        assert a.argmax() == ort_run(digits["pc"], x[None]).argmax()


def test_per_tensor_model_keeps_one_exponent_per_weight(digits):
    mod = compile_module(digits["pt"], "pynq", calibrate=digits["cal"], range_scale="off")
    inits = _inits(digits["pt"])
    conv2 = next(n for n in mod.graph.nodes if n.name == "conv2")
    assert conv2.attrs["weight_exp"] == math.floor(-math.log2(float(inits["conv2.weight_scale"])))


def test_asymmetric_uint8_activations_fall_back_to_calibration(digits):
    """ORT's default uint8 activations (zero point != 0): calibrated instead, each named in a note."""
    mod = compile_module(digits["u8"], "pynq", calibrate=digits["cal"])
    note = mod.notes.calibration.qdq
    assert note.activations == 0
    assert any(s.startswith("relu1: relu1_QuantizeLinear quantizes to uint8 with zero point") for s in note.notes)
    x = digits["x"][:1]
    assert mod.run(x, device="cpu")["logits"].argmax() == ort_run(digits["u8"], x).argmax()


def test_tensor_without_a_scale_is_still_calibrated(digits):
    """Drop the pairs on conv1 and relu1: relu1's exponent comes from calibration, the others' from the model."""
    m = onnx.ModelProto()
    m.CopyFrom(digits["pow2"])
    dropped = {"conv1_DequantizeLinear_Output": "conv1", "relu1_DequantizeLinear_Output": "relu1"}
    keep = [n for n in m.graph.node if n.name not in
            ("conv1_QuantizeLinear", "conv1_DequantizeLinear", "relu1_QuantizeLinear", "relu1_DequantizeLinear")]
    for n in keep:
        for i, name in enumerate(n.input):
            n.input[i] = dropped.get(name, name)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    mod = compile_module(m, "pynq", calibrate=digits["cal"])
    assert mod.notes.calibration.qdq.activations == 8
    g = optimize(import_onnx(m))
    cal = calibrate(g, [{"data": c} for c in digits["cal"]])
    assert "relu1" not in cal.fixed and mod.graph.tensors["relu1.q"].exp == cal.exponent("relu1")
    assert mod.graph.tensors["relu3.q"].exp == -math.log2(float(_inits(m)["relu3_scale"]))


def test_cli_compile_prints_the_inexact_scales(digits, tmp_path, capsys):
    from vtakit.cli import main

    onnx.save(digits["pt"], tmp_path / "pt.onnx")
    np.save(tmp_path / "cal.npy", np.stack(digits["cal"][:4]))
    assert main(["compile", str(tmp_path / "pt.onnx"), "--config", "pynq", "--calibrate", str(tmp_path / "cal.npy"),
                 "--range-scale", "off", "-o", str(tmp_path / "pt.vtamod")]) == 0
    out = capsys.readouterr().out
    assert "model scales kept: 10 activation tensors, weights of 4 nodes (some moved to a power of two)" in out
    assert "relu1: scale is not a power of two; the step is" in out
    # range scaling on (the default): the scales it meets are named in a line of their own
    assert main(["compile", str(tmp_path / "pt.onnx"), "--config", "pynq", "--calibrate", str(tmp_path / "cal.npy"),
                 "-o", str(tmp_path / "pt_rs.vtamod")]) == 0
    out = capsys.readouterr().out
    assert "of the model's activation tensors rescaled onto its own scales" in out
    assert "activation scales that are not powers of two kept exactly by range scaling" in out


def test_qlinear_conv_keeps_its_power_of_two_scales():
    """QLinearConv (imported as DequantizeLinear -> Conv -> QuantizeLinear): its int8 weights and
    input scale are used as they are; the result is within half an output step of onnxruntime's."""
    rng = np.random.default_rng(3)
    wq = rng.integers(-100, 100, (16, 16, 3, 3)).astype(np.int8)
    model = qlinear_conv_model(wq, 2.0 ** -4, 2.0 ** -9, 2.0 ** -3)
    x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    mod = compile_module(model, "pynq", calibrate=[x])
    conv = next(n for n in mod.graph.nodes if n.op == "QConv")
    assert np.array_equal(mod.graph.consts[conv.inputs[1]], wq) and conv.attrs["weight_exp"] == 9
    assert mod.graph.tensors["x.q"].exp == 4 and mod.notes.calibration.qdq.exact
    got = mod.run(x, device="sim")["y"]
    assert np.array_equal(got, mod.run(x, device="cpu")["y"])
    assert np.abs(got - ort_run(model, x)).max() <= 2.0 ** -3 / 2 + 1e-6


def test_equalization_drops_the_model_scales_with_a_note(digits):
    mod = compile_module(digits["pow2"], "pynq", calibrate=digits["cal"], equalize="exact")
    note = mod.notes.calibration.qdq
    assert note.activations == 0 and note.weights == ()
    assert "equalize exact: the model's scales are not used" in note.notes


def test_constant_dequantize_folds_as_onnx_defines_it():
    """The import folds a per-axis DequantizeLinear of constants in numpy (opset 13 has no onnx.reference
    evaluator): the same float32 values as onnx.reference at opset 19, and the scales recorded."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from vtakit.compiler.ops.quant import QDQ_WEIGHTS_NOTE

    rng = np.random.default_rng(1)
    q = rng.integers(-127, 128, (4, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(q, "q"), numpy_helper.from_array(rng.random(4).astype(np.float32), "s"),
             numpy_helper.from_array(np.zeros(4, np.int8), "zp")]
    dq = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["w"], axis=0, name="dq")
    add = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph([dq, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], inits)
    g13 = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    want = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])).run(
        None, {"x": np.zeros((4, 3), np.float32)})[0]
    assert np.array_equal(g13.consts["w"], want)
    rec = g13.notes[QDQ_WEIGHTS_NOTE]["w"]
    assert rec["node"] == "dq" and rec["axis"] == 0 and rec["scale"].shape == (4,)


def test_a_config_with_mul_keeps_non_power_of_two_weight_scales_exactly(digits):
    """With multipliers a layer whose model weight scales are not powers of two keeps them as float scales:
    its int8 weights are the model's bit for bit and one fixed-point multiplier per channel carries the
    model's scale (on pynq the same layer moves to the coarser power of two); host == functional model."""
    m = digits["pc"]
    inits = _inits(m)
    mod = compile_module(m, "pynq_mul", calibrate=digits["cal"])
    note = mod.notes.calibration.qdq
    assert any("at the model's own float scales (multipliers)" in s for s in note.notes)
    for name in ("conv1", "conv2", "conv3"):
        node = mod.graph.node(name)
        assert "multiplier" in node.attrs
        assert np.array_equal(mod.graph.consts[node.inputs[1]], inits[f"{name}.weight_quantized"])
    on_pynq = compile_module(m, "pynq", calibrate=digits["cal"]).graph
    conv1 = on_pynq.node("conv1")
    assert "multiplier" not in conv1.attrs
    assert not np.array_equal(on_pynq.consts[conv1.inputs[1]], inits["conv1.weight_quantized"])
    for x in digits["x"][:3]:
        a = mod.run(x[None], device="fsim")["logits"]
        assert np.array_equal(a, mod.run(x[None], device="cpu")["logits"])
        assert a.argmax() == ort_run(m, x[None]).argmax()


@pytest.mark.parametrize("config", ["pynq", "pynq_mul"])
def test_channel_scales_spread_wider_than_a_shift_vector_are_coarsened(digits, config):
    """A folded batch norm leaves near-silent channels whose per-channel scales (ORT: max|w| / 127) are
    2**20 below the others; a vector SHR spans 15 between channels, so those channels are rounded at the
    finest step it allows (a note says so) and the rest keep the model's exponents."""
    m = onnx.ModelProto()
    m.CopyFrom(digits["pc"])
    scale = next(i for i in m.graph.initializer if i.name == "conv1.weight_scale")
    s = numpy_helper.to_array(scale).copy()
    s[0] *= 2.0 ** -20
    scale.CopyFrom(numpy_helper.from_array(s, scale.name))
    for range_scale in ("on", "off"):  # on: the weights also scale by their activations' factors (below)
        mod = compile_module(m, config, calibrate=digits["cal"], range_scale=range_scale)
        note = mod.notes.calibration.qdq
        assert any(n.startswith("conv1.weight_DequantizeLinear: 1 of") and "at most 15" in n for n in note.notes)
        assert "conv1" in note.weights
        conv1 = next(n for n in mod.graph.nodes if n.name == "conv1")
        if config == "pynq":
            e = np.array(conv1.attrs["weight_exp"])
            assert e.max() - e.min() <= 15
            if range_scale == "off":
                assert e.max() - e.min() == 15
                assert list(e[1:]) == [math.floor(-math.log2(float(v))) for v in s[1:]]
        for x in digits["x"][:2]:
            assert np.array_equal(mod.run(x[None], device="fsim")["logits"], mod.run(x[None], device="cpu")["logits"])


def _ort_tensor(model: onnx.ModelProto, name: str, x: np.ndarray) -> np.ndarray:
    """Tensor `name` of the QDQ graph as written (ORT without graph optimizations, whose fusions round differently)."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(onnx.helper.make_value_info(name, onnx.TypeProto()))
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), plain, providers=["CPUExecutionProvider"])
    return sess.run([name], {"data": x})[0]


@pytest.mark.parametrize("config", ["pynq", "pynq_mul"])
def test_range_scaling_meets_scales_that_are_not_powers_of_two(digits, config):
    """ORT's scales are max/127, not powers of two.  A tensor of scale s held at exponent e (2**-e = s * r,
    r in [1, 2)) lands on the model's own grid when it holds r times its value: the graph is range-scaled by
    those factors, the weights' scales move with them (their int8 values stay the model's where the config
    keeps float weight scales), and relu1's int8 values are ORT's to 1 LSB."""
    m = digits["pc"]
    inits = _inits(m)
    mod = compile_module(m, config, calibrate=digits["cal"])
    factors = mod.notes.calibration.range_scale.model_factors
    s = float(inits["relu1_scale"])
    e = math.floor(-math.log2(s))
    assert factors["relu1"] == pytest.approx(2.0 ** -e / s) and mod.graph.tensors["relu1.q"].exp == e
    quantize = next(n for n in mod.graph.nodes if n.op == "Quantize")  # the input, after the host's Mul
    assert quantize.attrs["exp"] == math.floor(-math.log2(float(inits["data_scale"])))
    note = mod.notes.calibration.qdq
    assert any("kept exactly by range scaling" in n for n in note.notes)
    assert not any(n.startswith("relu1: scale is not a power of two") for n in note.notes)
    x = digits["x"][:3]
    seen: dict[str, np.ndarray] = {}
    run_graph(mod.graph, {"data": x[:1]}, observer=seen.__setitem__)
    diff = np.abs(seen["relu1.q"].astype(np.int32) - _ort_tensor(m, "relu1_QuantizeLinear_Output", x[:1]).astype(np.int32))
    assert diff.max() <= (1 if config == "pynq_mul" else 3) and np.mean(diff) < (0.01 if config == "pynq_mul" else 0.1)
    if config == "pynq_mul":
        conv1 = next(n for n in mod.graph.nodes if n.name == "conv1")
        assert np.array_equal(mod.graph.consts[conv1.inputs[1]], inits["conv1.weight_quantized"])
    for v in x:
        got = mod.run(v[None], device="fsim")["logits"]
        assert np.array_equal(got, mod.run(v[None], device="cpu")["logits"])
        assert got.argmax() == ort_run(m, v[None], as_written=True).argmax()
