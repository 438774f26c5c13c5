"""Int8 weights rounded for each layer's output on the calibration samples (compiler.quant.techniques.weight_rounding)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.smooth_inputs import smooth_images

from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.pipeline import optimize
from vtakit.compiler.quant.int8 import float_and_int8
from vtakit.compiler.quant.techniques.equalize import correct_bias
from vtakit.compiler.ir import Node
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.module.report import calibration_lines
from vtakit.compiler.quant.techniques.weight_rounding import MIN_ROWS_PER_INPUT, gptq_round, patch_rows, plan_rounding
from vtakit.compiler.zoo.numpy_ops import conv2d
from vtakit.errors import CompileError

C = 8


_smooth = smooth_images


def _edge_kernels(rng) -> np.ndarray:
    """3x3 kernels whose taps sum to zero: differences of neighbours, as folded batch norms often are."""
    w = rng.standard_normal((C, 3, 3, 3)).astype(np.float32)
    return (w - w.mean(axis=(1, 2, 3), keepdims=True)).astype(np.float32)


def _model():
    """x (3 channels) -> 3x3/2 edge conv + ReLU -> depthwise 3x3 -> 1x1 conv -> y: a photo network's first layers."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(_edge_kernels(rng), "w1"),
             numpy_helper.from_array((rng.standard_normal(C) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((C, 1, 3, 3)) * 0.4).astype(np.float32), "wd"),
             numpy_helper.from_array((rng.standard_normal((C, C, 1, 1)) * 0.3).astype(np.float32), "wp")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], strides=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "wd"], ["d"], group=C, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d", "wp"], ["y"])]
    graph = helper.make_graph(nodes, "rounding", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 12, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_with_an_identity_second_moment_every_weight_rounds_to_nearest():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 5, 40))
    exps = rng.integers(4, 7, (2, 5))
    want = np.clip(np.rint(w * 2.0 ** exps[..., None]), -127, 127)
    np.testing.assert_array_equal(gptq_round(w, exps, np.stack([np.eye(40)] * 2)), want)


@pytest.mark.parametrize("stride,dilation,group,pads", [(1, 1, 1, (1, 1, 1, 1)), (2, 1, 1, (0, 0, 1, 1)),
                                                         (1, 2, 1, (2, 2, 2, 2)), (2, 1, 4, (1, 0, 1, 0))])
def test_patch_rows_times_the_weights_is_the_convolution(stride, dilation, group, pads):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 11, 10)).astype(np.float32)
    w = rng.standard_normal((12, 8 // group, 3, 3)).astype(np.float32)
    node = Node("Conv", "c", ["x", "w"], ["y"], dict(strides=(stride, stride), dilations=(dilation, dilation),
                                                     pads=pads, group=group))
    rows = patch_rows(node, x, w.shape, group)  # (rows, groups, d)
    per_group = w.reshape(group, 12 // group, -1)
    got = np.einsum("rgd,gkd->rgk", rows, per_group).reshape(rows.shape[0], 12)
    want = _ort_conv(x, w, stride, dilation, group, pads)
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1).reshape(-1, 12), rtol=1e-4, atol=1e-4)


def _ort_conv(x, w, stride, dilation, group, pads) -> np.ndarray:
    """onnxruntime's convolution, the reference for patch_rows."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride] * 2, dilations=[dilation] * 2,
                            group=group, pads=list(pads[:2]) + list(pads[2:]))
    graph = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_gptq_weights_bring_an_edge_conv_closer_to_float_on_unseen_smooth_inputs():
    """The rounding the stem of a photo network needs: held-out inputs, error at least a third lower."""
    w = _edge_kernels(np.random.default_rng(3))
    node = Node("Conv", "c", ["x", "w"], ["y"], dict(strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), group=1))
    h = sum(np.einsum("rgi,rgj->gij", r, r) for r in
            (patch_rows(node, x, w.shape, 1).astype(np.float64) for x in _smooth(8, 0)))
    exps = np.full(C, int(np.floor(np.log2(127 / np.abs(w).max()))))
    nearest = np.clip(np.rint(w * 2.0 ** exps[0]), -127, 127) * 2.0 ** -exps[0]
    gptq = gptq_round(w.reshape(1, C, -1), exps.reshape(1, C), h).reshape(w.shape) * 2.0 ** -exps[0]
    errors = {}
    for name, wq in (("nearest", nearest), ("gptq", gptq)):
        errors[name] = sum(np.sum((conv2d(x, wq.astype(np.float32), pads=(1, 1, 1, 1)) -
                                   conv2d(x, w, pads=(1, 1, 1, 1))) ** 2) for x in _smooth(8, 99))
    assert errors["gptq"] < 0.67 * errors["nearest"], errors


def test_layers_with_few_rows_per_input_keep_nearest_rounding():
    """A dense layer seeing one row per sample (a classifier, a squeeze-and-excitation conv) is not fitted."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "fc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(w, "w")])
    g = optimize(import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))
    few = [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(MIN_ROWS_PER_INPUT * 16 - 1)]
    dense = next(n.name for n in g.nodes if n.op == "Dense")
    rounded, shifts, summary = plan_rounding(g, few, [dense], lambda w: np.full(w.shape[0], 6))
    assert rounded == {} and shifts == {} and summary.few_rows == [dense]
    _, _, summary = plan_rounding(g, few + few[:1], [dense], lambda w: np.full(w.shape[0], 6))
    assert summary.few_rows == [] and summary.considered == 4


def test_bias_correction_measures_the_weights_as_rounded():
    g = optimize(import_onnx(_model()))
    samples = [{"x": x} for x in _smooth(6, 0)]
    names = [n.name for n in g.nodes if n.op == "Conv"]
    rounded, shifts, _ = plan_rounding(g, samples, names, lambda w: np.full(w.shape[0], 5))
    assert rounded, "the smooth samples give every conv enough rows"
    # the mean output shift bias correction takes for a rounded layer: its error over the real patches,
    # the stride-2 conv's one-sided padding included
    stem = g.nodes[0]
    assert stem.name in shifts
    w = g.consts[stem.inputs[1]]
    delta = rounded[stem.name][1] * 2.0 ** -5 - w
    want = np.mean([conv2d(s["x"], delta.astype(np.float32), stride=2, pads=(0, 0, 1, 1)).mean(axis=(0, 2, 3))
                    for s in samples], axis=0)
    np.testing.assert_allclose(shifts[stem.name], want, rtol=1e-4, atol=1e-6)
    corrected = correct_bias(g, samples, lambda w: w, shifts)  # bias correction subtracts the measured shift
    np.testing.assert_allclose(corrected.consts[corrected.node(stem.name).inputs[2]],
                               g.consts[stem.inputs[2]] - shifts[stem.name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config", ["pynq", "pynq_mul"])
def test_gptq_changes_only_weight_values_and_the_simulators_agree(config):
    model, cal = _model(), _smooth(8, 0)
    tests = _smooth(4, 50)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    modules, errors = {}, {}
    for mode in ("gptq", "nearest"):
        m = modules[mode] = compile_module(model, config, calibrate=cal, weight_rounding=mode)
        got = [m.run(x, device="cpu")["y"] for x in tests]
        errors[mode] = sum(float(np.sum((g - sess.run(None, {"x": x})[0]) ** 2)) for g, x in zip(got, tests))
        np.testing.assert_array_equal(m.run(tests[0], device="fsim")["y"], got[0])
    gptq, nearest = modules["gptq"], modules["nearest"]
    if config == "pynq":
        assert gptq.notes.calibration.weight_rounding == "gptq"
        assert any(line.startswith("weight rounding gptq:") and "of 3 conv/dense" in line for line in calibration_lines(gptq.notes.calibration))
        assert errors["gptq"] < errors["nearest"], errors
        changed = [t for t in gptq.graph.consts if t.endswith(".weight_q")
                   and not np.array_equal(gptq.graph.consts[t], nearest.graph.consts[t])]
        assert changed
    else:  # float per-channel weight scales with multipliers: rounded to nearest (weight_rounding.py)
        assert gptq.notes.calibration.weight_rounding == "nearest"
        for t, v in gptq.graph.consts.items():
            np.testing.assert_array_equal(v, nearest.graph.consts[t])
    assert [n.op for n in gptq.graph.nodes] == [n.op for n in nearest.graph.nodes]
    for a, b in zip(gptq.graph.nodes, nearest.graph.nodes):  # the same weight exponents
        assert a.attrs.get("weight_exp") == b.attrs.get("weight_exp")


def test_an_unknown_weight_rounding_is_one_clear_error():
    with pytest.raises(CompileError, match="unknown weight_rounding 'best'; use one of auto, gptq, nearest"):
        compile_module(_model(), "pynq", calibrate=_smooth(2, 0), weight_rounding="best")
    with pytest.raises(CompileError, match="unknown weight_rounding ''"):
        float_and_int8(optimize(import_onnx(_model())), [x for x in _smooth(2, 0)], weight_rounding="")


def test_the_default_chooses_the_rounding_by_the_outputs():
    """GPTQ where it lowers the output error on the calibration samples (recipe.py): it loses where the
    calibration samples are unlike the inputs (README, issue 16), so it is not applied blindly."""
    module = compile_module(_model(), "pynq", calibrate=_smooth(8, 0))
    notes = module.notes.calibration
    assert "weight_rounding" in notes.recipe.searched
    assert notes.weight_rounding == notes.recipe.chosen["weight_rounding"]
    assert (notes.gptq is not None) == (notes.weight_rounding == "gptq")
