"""LSTM, GRU and RNN on the host (ops/recurrent.py) against onnxruntime, in every ONNX form:
directions, layouts, sequence lengths, initial states, peepholes, clip, input_forget,
linear_before_reset, activations with their alpha / beta; and their bad attributes as one line."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.errors import CompileError

pytestmark = pytest.mark.filterwarnings("ignore:onnx.checker")
SEQ, BATCH, IN, HID = 5, 3, 6, 4
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(op: str, *, direction="forward", layout=0, lens=False, initial=False, peepholes=False,
           outputs=None, **attrs):
    rng = np.random.default_rng(sum(map(ord, op + direction)) + 2 * lens + 4 * initial + 8 * peepholes)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    inits = [numpy_helper.from_array(rng.standard_normal((dirs, g * HID, IN)).astype(np.float32) * 0.5, "W"),
             numpy_helper.from_array(rng.standard_normal((dirs, g * HID, HID)).astype(np.float32) * 0.5, "R"),
             numpy_helper.from_array(rng.standard_normal((dirs, 2 * g * HID)).astype(np.float32) * 0.3, "B")]
    ins = ["x", "W", "R", "B", "", ""]
    if lens:
        inits.append(numpy_helper.from_array(np.array([SEQ, 2, 4], np.int32), "lens"))
        ins[4] = "lens"
    state = (BATCH, dirs, HID) if layout else (dirs, BATCH, HID)
    if initial:
        inits.append(numpy_helper.from_array(rng.standard_normal(state).astype(np.float32), "h0"))
        ins[5] = "h0"
        if op == "LSTM":
            inits.append(numpy_helper.from_array(rng.standard_normal(state).astype(np.float32), "c0"))
            ins.append("c0")
    if peepholes:
        ins += [""] * (7 - len(ins))
        inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 3 * HID)).astype(np.float32), "P"))
        ins.append("P")
    while ins and not ins[-1]:
        ins.pop()
    outs = outputs or (["y", "y_h", "y_c"] if op == "LSTM" else ["y", "y_h"])
    node = helper.make_node(op, ins, outs, hidden_size=HID, direction=direction, layout=layout, **attrs)
    x_shape = (BATCH, SEQ, IN) if layout else (SEQ, BATCH, IN)
    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), x_shape


def _onnxruntime(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))


def _check(model, x_shape, rtol=1e-5, want=None):
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    want = want(x) if want else _onnxruntime(model, x)
    got = vtakit.compile(model, target="cpu").run({"x": x}, device="cpu")
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_match_onnxruntime(op, direction):
    _check(*_model(op, direction=direction, initial=True))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_batch_first_layout_is_the_transposed_sequence_first_one(op):
    """onnxruntime's CPU kernels refuse layout 1: judged against its layout 0 on the transposed input."""
    seq_first, _ = _model(op, direction="bidirectional", initial=True)
    batch_first, x_shape = _model(op, direction="bidirectional", layout=1, initial=True)  # same weights
    states = {i.name: numpy_helper.to_array(i) for i in seq_first.graph.initializer if i.name in ("h0", "c0")}
    for init in batch_first.graph.initializer:  # the same initial states, batch first
        if init.name in states:
            init.CopyFrom(numpy_helper.from_array(states[init.name].transpose(1, 0, 2).copy(), init.name))

    def want(x):
        out = _onnxruntime(seq_first, x.transpose(1, 0, 2).copy())
        return {k: v.transpose(2, 0, 1, 3) if k == "y" else v.transpose(1, 0, 2) for k, v in out.items()}

    _check(batch_first, x_shape, want=want)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_sequence_lengths_zero_the_steps_past_each_end(op, direction):
    _check(*_model(op, direction=direction, lens=True))


def test_lstm_peepholes_clip_and_input_forget():
    _check(*_model("LSTM", direction="bidirectional", peepholes=True, initial=True, clip=0.7))
    _check(*_model("LSTM", peepholes=True, input_forget=1))


def test_gru_linear_before_reset():
    _check(*_model("GRU", direction="bidirectional", initial=True, linear_before_reset=1))


def test_activations_take_their_alpha_and_beta_in_order():
    acts = ["HardSigmoid", "LeakyRelu", "ScaledTanh", "Sigmoid", "Tanh", "Softsign"]
    _check(*_model("LSTM", direction="bidirectional", activations=acts,
                   activation_alpha=[0.3, 0.1, 0.9], activation_beta=[0.4, 1.5]))
    _check(*_model("RNN", activations=["Relu"]))
    _check(*_model("GRU", activations=["Sigmoid", "Softplus"]))


def test_only_the_outputs_read_are_computed():
    model, x_shape = _model("LSTM", direction="bidirectional", outputs=["", "y_h"])
    _check(model, x_shape)


@pytest.mark.parametrize("layout", [0, 1])
def test_a_cell_whose_three_outputs_are_read_runs_once(layout, monkeypatch):
    """Y, Y_h and Y_c are three IR nodes with the same inputs: the sequence is computed once per run."""
    from vtakit.compiler.ops import recurrent

    model, x_shape = _model("LSTM", direction="bidirectional", layout=layout)
    module = vtakit.compile(model, target="cpu")
    runs = []
    real = recurrent._run_all
    monkeypatch.setattr(recurrent, "_run_all", lambda a, args: runs.append(1) or real(a, args))
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    got = module.run({"x": x}, device="cpu")
    assert len(runs) == 1
    for i, name in enumerate(["y", "y_h", "y_c"]):  # each output alone (onnxruntime has no layout 1)
        alone, _ = _model("LSTM", direction="bidirectional", layout=layout, outputs=["", "", ""][:i] + [name])
        np.testing.assert_array_equal(got[name], vtakit.compile(alone, target="cpu").run({"x": x}, device="cpu")[name])
    runs.clear()
    module.run({"x": x + 1}, device="cpu")  # new inputs: computed again, once
    assert len(runs) == 1


@pytest.mark.parametrize("attrs, message", [
    (dict(direction="sideways"), "direction 'sideways' is not forward, reverse or bidirectional"),
    (dict(activations=["Sigmoid", "Tanh"]), "activations lists 2 functions; LSTM with 1 direction(s) takes 3"),
    (dict(activations=["Sigmoid", "Gelu", "Tanh"]), "activation 'gelu' is not one ONNX defines for LSTM"),
    (dict(layout=2), "layout 2 is not 0 or 1"),
])
def test_bad_attributes_are_one_line_naming_the_node(attrs, message):
    model, _ = _model("LSTM", **attrs)
    model.graph.node[0].name = "encoder_lstm"
    with pytest.raises(CompileError, match="encoder_lstm") as e:
        vtakit.compile(model, target="cpu")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_weights_that_do_not_fit_the_hidden_size():
    model, _ = _model("GRU")
    next(a for a in model.graph.node[0].attribute if a.name == "hidden_size").i = HID + 1
    with pytest.raises(CompileError, match="do not fit 1 direction"):
        vtakit.compile(model, target="cpu")


def _crnn() -> tuple:
    """A small CRNN, the shape of ddddocr's and most CTC text recognizers: convs over a text-line image,
    its columns as a sequence into a bidirectional LSTM, a per-step classifier."""
    rng = np.random.default_rng(3)

    def w(*shape, scale=0.3):
        return rng.standard_normal(shape).astype(np.float32) * scale

    inits = {"w1": w(16, 1, 3, 3), "b1": w(16, scale=0.1), "w2": w(32, 16, 3, 3, scale=0.1), "b2": w(32, scale=0.1),
             "shape": np.array([0, 32 * 4, 16], np.int64), "W": w(2, 64, 128, scale=0.1), "R": w(2, 64, 16),
             "B": w(2, 128, scale=0.1), "seq_shape": np.array([16, 32], np.int64), "fc": w(32, 11)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),  # (1, 32, 4, 16)
             helper.make_node("Reshape", ["p2", "shape"], ["cols"]),  # (1, 128, 16)
             helper.make_node("Transpose", ["cols"], ["seq"], perm=[2, 0, 1]),  # (16, 1, 128)
             helper.make_node("LSTM", ["seq", "W", "R", "B"], ["y"], hidden_size=16, direction="bidirectional"),
             helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),  # (16, 1, 2, 16)
             helper.make_node("Reshape", ["yt", "seq_shape"], ["steps"]),
             helper.make_node("MatMul", ["steps", "fc"], ["logits"])]
    graph = helper.make_graph(nodes, "crnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 1, 16, 64))],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, (16, 11))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_crnn_runs_its_convs_on_the_accelerator_and_its_lstm_in_float_on_the_host():
    model = _crnn()
    rng = np.random.default_rng(4)
    cal = [rng.uniform(0, 1, (1, 1, 16, 64)).astype(np.float32) for _ in range(4)]
    x = rng.uniform(0, 1, (1, 1, 16, 64)).astype(np.float32)
    module = vtakit.compile(model, "pynq", calibrate=cal)
    on_accelerator = [t.op for t in module.vta_tasks()]
    host = [t for t in module.tasks if isinstance(t, str)]  # the nodes the host runs
    assert on_accelerator.count("QConv") == 2, on_accelerator
    lstm = [n for n in module.graph.nodes if n.op == "LSTM"]
    assert len(lstm) == 1 and lstm[0].name in host and module.graph.tensors[lstm[0].inputs[0]].dtype == "float32"
    cpu, sim = module.run({"x": x}, device="cpu"), module.run({"x": x}, device="sim")
    np.testing.assert_array_equal(cpu["logits"], sim["logits"])
    want = _onnxruntime(model, x)["logits"]
    got, want = cpu["logits"].astype(np.float64).ravel(), want.astype(np.float64).ravel()
    assert got @ want / (np.linalg.norm(got) * np.linalg.norm(want)) > 0.999  # 0.99996 when written
