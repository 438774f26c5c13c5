"""nn.Linear over a sequence (a rank-3 MatMul by a constant, as torch exports it) runs as an accelerator dense
layer over the rows, with its weights reused across the rows."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.backends.vta import ops
from vtakit.compiler.backends.vta.runtime import act_nchw, from_nchw, to_nchw
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.module.macs import module_macs
from vtakit.compiler.passes.linear_rows import flatten_matmul_rows

RNG = np.random.default_rng(11)
TOKENS, HIDDEN, WIDE = 24, 48, 80


def _linear_block(bias_first: bool = False) -> onnx.ModelProto:
    """x (1, T, C) -> Linear -> ReLU -> Linear, plus x: a transformer's MLP as torch exports it (same weights
    on every call)."""
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((HIDDEN, WIDE)) / np.sqrt(HIDDEN)).astype(np.float32)
    w2 = (rng.standard_normal((WIDE, HIDDEN)) / np.sqrt(WIDE)).astype(np.float32)
    b1, b2 = (0.1 * rng.standard_normal(WIDE)).astype(np.float32), (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
    add2 = ["b2", "m2"] if bias_first else ["m2", "b2"]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_bias"),
             helper.make_node("Relu", ["a1"], ["r1"], name="act"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
             helper.make_node("Add", add2, ["a2"], name="fc2_bias"),
             helper.make_node("Add", ["a2", "x"], ["y"], name="residual")]
    inits = [numpy_helper.from_array(v, k) for k, v in dict(w1=w1, w2=w2, b1=b1, b2=b2).items()]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, HIDDEN])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, HIDDEN])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_rank3_matmul_by_a_constant_becomes_a_dense_over_the_rows_with_its_bias():
    for bias_first in (False, True):
        g = flatten_matmul_rows(import_onnx(_linear_block(bias_first)))
        ops_ = [n.op for n in g.nodes]
        assert ops_.count("Dense") == 2 and "MatMul" not in ops_ and ops_.count("Add") == 1  # biases taken in
        residual = g.node("residual")  # in the rows form, beside the dense layer that feeds it
        assert g.tensors[residual.outputs[0]].shape == (TOKENS, HIDDEN) and g.producer(residual.inputs[0]).op == "Dense"
        dense = g.node("fc2")
        assert g.tensors[dense.inputs[0]].shape == (TOKENS, WIDE) and g.consts[dense.inputs[1]].shape == (HIDDEN, WIDE)
        x = RNG.standard_normal((1, TOKENS, HIDDEN)).astype(np.float32)
        module = vtakit.compile(_linear_block(bias_first), target="cpu")
        w = {t.name: numpy_helper.to_array(t) for t in _linear_block(bias_first).graph.initializer}
        want = np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"] + x
        np.testing.assert_allclose(module.run({"x": x}, device="cpu")["y"], want, rtol=1e-5, atol=1e-5)


def test_the_linear_layers_run_on_the_accelerator_bit_identical_to_the_cpu():
    model = _linear_block()
    module = vtakit.compile(model, "pynq", calibrate=[RNG.standard_normal((1, TOKENS, HIDDEN)).astype(np.float32)
                                                     for _ in range(3)])
    assert {"fc1", "fc2"} <= {t.node for t in module.vta_tasks()}
    assert module.graph.node("fc2").attrs["residual_of"] == "residual"  # the residual add rides on fc2's task
    split = module_macs(module)
    assert split.accelerator == 2 * TOKENS * HIDDEN * WIDE and split.host == 0 and split.accelerator_share == 1.0
    x = RNG.standard_normal((1, TOKENS, HIDDEN)).astype(np.float32)
    outs = {d: module.run({"x": x}, device=d)["y"] for d in ("cpu", "fsim", "sim")}
    assert all(np.array_equal(outs["cpu"], y) for y in outs.values())


def test_a_2d_activation_is_a_row_of_pixels_on_the_accelerator():
    assert act_nchw((5, 32)) == (1, 32, 1, 5) and act_nchw((1, 32)) == (1, 32, 1, 1)
    v = RNG.standard_normal((5, 32)).astype(np.float32)
    assert np.array_equal(to_nchw(v)[0, :, 0, :], v.T)
    assert np.array_equal(from_nchw(to_nchw(v), v.shape), v)
    v3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    assert np.array_equal(from_nchw(to_nchw(v3), v3.shape), v3)


def test_a_dense_over_128_rows_loads_its_weights_once_per_tile():
    """128 tokens x 256 -> 256: one weight load serves every row (was: one per row, 2.6 % of peak)."""
    x = RNG.integers(-128, 128, (128, 256), dtype=np.int8)
    w = RNG.integers(-128, 128, (256, 256), dtype=np.int8)
    y, rep = ops.dense(x, w, shift=8, clip=(-127, 127), config="pynq", device="sim")
    want = np.clip((x.astype(np.int64) @ w.T.astype(np.int64)) >> 8, -127, 127)
    assert np.array_equal(y, want)
    assert rep.utilization is not None and rep.utilization >= 0.6


def test_the_report_counts_host_macs_and_the_accelerator_share():
    """On pynq the report puts every MAC of the two linear layers on the accelerator and prints the share;
    the float module (target cpu, no accelerator) counts the same MACs on the host."""
    module = vtakit.compile(_linear_block(), "pynq", calibrate=[RNG.standard_normal((1, TOKENS, HIDDEN)).astype(np.float32)])
    module.run({"x": RNG.standard_normal((1, TOKENS, HIDDEN)).astype(np.float32)}, device="sim")
    rep = module.report()
    assert rep.accelerator_macs == 2 * TOKENS * HIDDEN * WIDE and rep.host_macs == 0
    assert rep.summary_lines()[2] == module_macs(module).line() == "MACs: 100.0 % of 0.2 M on the accelerator (0.0 M on the host)"
    assert rep.summary_lines()[3].startswith("host on the PYNQ-Z1's Cortex-A9 (650 MHz), estimated: ")
    float_module = vtakit.compile(_linear_block(), target="cpu")
    float_module.run({"x": RNG.standard_normal((1, TOKENS, HIDDEN)).astype(np.float32)}, device="cpu")
    assert float_module.report().host_macs == 2 * TOKENS * HIDDEN * WIDE


def test_token_rows_leave_in_int8_and_one_row_keeps_its_int32_accumulator():
    """Logits per token leave the accelerator in int8 (as int32 they would leave as four byte planes);
    one row of logits (a classifier's) keeps its int32 accumulator."""
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((HIDDEN, WIDE)) / np.sqrt(HIDDEN)).astype(np.float32)
    for tokens, dtype in ((TOKENS, "int8"), (1, "int32")):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="head")]
        g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, WIDE])],
                              [numpy_helper.from_array(w, "w")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        module = vtakit.compile(model, "pynq", calibrate=[rng.standard_normal((1, tokens, HIDDEN)).astype(np.float32)])
        assert module.graph.tensors[module.graph.node("head").outputs[0]].dtype == dtype, tokens

