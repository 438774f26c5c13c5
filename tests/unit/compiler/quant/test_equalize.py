"""Cross-layer equalization and bias correction (compiler.quant.techniques.equalize)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from vtakit.compiler.pipeline import optimize
from vtakit.compiler.quant.techniques.equalize import _in_ranges, _out_ranges, correct_bias, equalizable_pairs, equalize, input_means
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.quant.quantize import weight_roundtrip

C = 8


def _model(act: str, second: str, seed: int = 0):
    """conv (channel ranges spread over 1e-3..1e2) -> act -> conv | depthwise conv -> conv 1x1."""
    rng = np.random.default_rng(seed)
    spread = np.logspace(-3, 2, C).astype(np.float32)
    w1 = rng.standard_normal((C, 3, 3, 3)).astype(np.float32) * spread[:, None, None, None]
    inits = [numpy_helper.from_array(w1, "w1"),
             numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b1")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1])]
    h = "h"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["h"], ["a"]))
        h = "a"
    elif act == "relu6":
        inits += [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
        nodes.append(helper.make_node("Clip", ["h", "lo", "hi"], ["a"]))
        h = "a"
    if second == "depthwise":
        w2 = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", [h, "w2", "b2"], ["d"], pads=[1, 1, 1, 1], group=C))
        w3 = rng.standard_normal((4, C, 1, 1)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["d", "w3"], ["y"]))
        inits.append(numpy_helper.from_array(w3, "w3"))
    else:
        w2 = rng.standard_normal((4, C, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", [h, "w2", "b2"], ["y"], pads=[1, 1, 1, 1]))
    inits += [numpy_helper.from_array(w2, "w2"),
              numpy_helper.from_array(rng.standard_normal(w2.shape[0]).astype(np.float32), "b2")]
    graph = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 10])], inits)
    return optimize(import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))


def _feeds(n: int = 3, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 10, 10)).astype(np.float32)} for _ in range(n)]


def _out(g, feeds):
    return run_graph(g, dict(feeds))["y"]


@pytest.mark.parametrize("act,second", [("none", "conv"), ("relu", "conv"), ("relu", "depthwise")])
def test_equalized_graph_computes_the_same_and_ranges_become_equal(act, second):
    g = _model(act, second)
    pairs = equalizable_pairs(g)
    assert len(pairs) >= 1
    eq = equalize(g)
    for feeds in _feeds():
        ref, got = _out(g, feeds), _out(eq, feeds)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(ref))))
    for first, second_node in equalizable_pairs(eq):
        np.testing.assert_allclose(_out_ranges(eq.consts[first.inputs[1]]), _in_ranges(eq, second_node), rtol=1e-4)
    r1 = _out_ranges(eq.consts[equalizable_pairs(eq)[0][0].inputs[1]])
    before = _out_ranges(g.consts[equalizable_pairs(g)[0][0].inputs[1]])
    assert before.max() / before.min() > 1e4 and r1.max() / r1.min() < before.max() / before.min()


def test_relu6_does_not_commute_so_the_pair_is_left_alone():
    g = _model("relu6", "conv")
    assert equalizable_pairs(g) == []
    eq = equalize(g)
    assert all(np.array_equal(eq.consts[n.inputs[1]], g.consts[n.inputs[1]]) for n in g.nodes)
    assert len(equalizable_pairs(g, clip_as_relu=True)) == 1


def test_bias_correction_removes_the_mean_shift_of_quantized_weights():
    g = _model("none", "conv")
    samples = _feeds(4)
    fixed = correct_bias(g, samples, weight_roundtrip)
    quantized = fixed.copy()
    plain = g.copy()
    for graph in (quantized, plain):
        for n in graph.nodes:
            if n.op == "Conv":
                graph.consts[n.inputs[1]] = weight_roundtrip(graph.consts[n.inputs[1]]).astype(np.float32)
    means = input_means(g, samples)
    assert set(means) == {n.inputs[0] for n in g.nodes if n.op == "Conv"}

    def channel_bias(graph):
        diffs = [(_out(graph, f) - _out(g, f)).mean(axis=(0, 2, 3)) for f in samples]
        return np.abs(np.mean(diffs, axis=0))

    assert channel_bias(quantized).mean() < channel_bias(plain).mean()
