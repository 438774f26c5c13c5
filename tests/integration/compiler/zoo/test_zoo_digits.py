"""digits_cnn: the committed trained model keeps its recorded accuracy, and the
numpy trainer that produced it computes correct gradients."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from vtakit.compiler import zoo
from vtakit.compiler.zoo import train_digits
from vtakit.compiler.zoo.digits import SPLIT

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")


def predict(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"data": x})[0].argmax(axis=1)


@pytest.fixture(scope="module")
def data():
    return zoo.digits_data()


def test_digits_data_split(data):
    x_train, y_train, x_test, y_test = data
    assert x_train.shape == (1437, 1, 8, 8) and x_test.shape == (360, 1, 8, 8)
    assert x_train.dtype == x_test.dtype == np.float32
    assert y_train.dtype == y_test.dtype == np.int64
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert np.bincount(y_test, minlength=10).min() >= 35          # stratified: 35-37 per class


def test_committed_model_keeps_recorded_accuracy(data):
    x_train, y_train, x_test, y_test = data
    record = zoo.digits_record()
    model = zoo.build("digits_cnn")
    onnx.checker.check_model(model, full_check=True)
    correct = int((predict(model, x_test) == y_test).sum())
    assert record["n_test"] == len(y_test) and record["split"] == SPLIT
    assert correct == record["test_correct"] == round(record["test_accuracy"] * len(y_test))
    assert record["test_accuracy"] >= 0.96
    train_accuracy = float((predict(model, x_train) == y_train).mean())
    assert train_accuracy == pytest.approx(record["train_accuracy"], abs=0.5 / len(y_train))


def test_committed_model_interface():
    model = zoo.digits_cnn()
    assert {n.op_type for n in model.graph.node} <= {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"}
    assert all(len(n.input) == 3 for n in model.graph.node if n.op_type in ("Conv", "Gemm"))
    for info, name in ((model.graph.input[0], "data"), (model.graph.output[0], "logits")):
        assert info.name == name and info.type.tensor_type.shape.dim[0].dim_param == "N"
    assert zoo.macs(model) == 64 * 16 * 9 + 64 * 32 * 144 + 16 * 32 * 288 + 512 * 10


def test_fixed_batch_and_other_opset(data):
    x_test = data[2][:8]
    reference = predict(zoo.digits_cnn(), x_test)
    fixed = zoo.build("digits_cnn", batch=8)
    assert fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 8
    onnx.checker.check_model(fixed, full_check=True)
    np.testing.assert_array_equal(predict(fixed, x_test), reference)
    converted = zoo.build("digits_cnn", opset=17)
    onnx.checker.check_model(converted, full_check=True)
    assert converted.opset_import[0].version == 17
    np.testing.assert_array_equal(predict(converted, x_test), reference)


def test_trainer_gradients_match_finite_differences():
    """Directional derivative of the loss (float64, so differences are exact enough)."""
    rng = np.random.default_rng(1)
    params = {k: v.astype(np.float64) for k, v in train_digits.init_params(rng).items()}
    x = rng.uniform(0, 1, (3, 1, 8, 8))
    y = np.array([0, 3, 7])

    def loss(p: dict[str, np.ndarray]) -> float:
        logits = train_digits.forward(p, x)[0]
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return float(-log_probs[np.arange(len(y)), y].mean())

    logits, cache = train_digits.forward(params, x)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    probs[np.arange(len(y)), y] -= 1.0
    grads = train_digits.backward(params, cache, probs / len(y))
    for name, value in params.items():
        direction = rng.standard_normal(value.shape)
        eps = 1e-6
        plus = {**params, name: value + eps * direction}
        minus = {**params, name: value - eps * direction}
        numeric = (loss(plus) - loss(minus)) / (2 * eps)
        analytic = float((grads[name] * direction).sum())
        assert analytic == pytest.approx(numeric, rel=1e-3, abs=1e-6), name
