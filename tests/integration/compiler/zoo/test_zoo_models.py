"""The seeded zoo models: valid ONNX, sane activations, deterministic, opset-portable.

"Sane" is what a compiler test needs from random weights: finite logits of
moderate size that depend on the input, so a wrong kernel changes the answer.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from vtakit.compiler import zoo
from vtakit.compiler.zoo.resnet import RESIDUAL_GAMMA

ort = pytest.importorskip("onnxruntime")


def session(model: onnx.ModelProto, extra_outputs: tuple[str, ...] = ()) -> ort.InferenceSession:
    """An onnxruntime session; extra_outputs exposes intermediate tensors too."""
    if extra_outputs:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                                  for name in extra_outputs)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def noise(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def run_inputs(model: onnx.ModelProto, name: str, count: int = 8) -> np.ndarray:
    """Outputs for `count` seeded standard-normal inputs, one row per input (batch-1 model)."""
    sess = session(model)
    return np.concatenate([sess.run(None, {"data": noise(zoo.input_shape(name), 100 + i)})[0]
                           for i in range(count)])


def assert_sane_logits(logits: np.ndarray, centred: bool = True) -> None:
    """Finite, O(1) and input-dependent.  Only a centred classifier (small_cnn) is expected to change
    its argmax between noise inputs: ResNet and MobileNet keep a plain one, so their logits are a
    common vector (pooled noise features barely differ) plus an input-dependent part."""
    assert np.isfinite(logits).all()
    stds = logits.std(axis=1)
    assert (stds > 0.1).all() and (stds < 100).all(), stds
    spread = np.abs(logits - logits.mean(axis=0)).max()
    assert spread > 1e-2 * stds.mean(), "logits do not depend on the input"
    if centred:
        assert len(set(logits.argmax(axis=1).tolist())) > 1, "argmax never changes"
        assert np.corrcoef(logits[0], logits[1])[0, 1] < 0.99


@pytest.fixture(scope="module")
def resnet18() -> onnx.ModelProto:
    return zoo.build("resnet18")


@pytest.fixture(scope="module")
def small() -> onnx.ModelProto:
    return zoo.build("small_cnn")


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


# -- ResNet ------------------------------------------------------------------------------------

def test_resnet18_structure_and_names(resnet18):
    onnx.checker.check_model(resnet18, full_check=True)
    assert op_counts(resnet18) == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "MaxPool": 1,
                                   "Add": 8, "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    names = {node.name for node in resnet18.graph.node}
    assert {"conv1", "layer1.0.conv1", "layer1.0.bn1", "layer1.0.add", "layer2.0.downsample.conv",
            "layer4.1.bn2", "fc"} <= names
    assert [i.name for i in resnet18.graph.input] == ["data"]
    assert [o.name for o in resnet18.graph.output] == ["logits"]
    fc = next(n for n in resnet18.graph.node if n.name == "fc")
    assert {a.name: onnx.helper.get_attribute_value(a) for a in fc.attribute}["transB"] == 1
    weights = {i.name: i for i in resnet18.graph.initializer}
    assert list(weights["fc.weight"].dims) == [1000, 512]
    assert list(weights["conv1.weight"].dims) == [64, 3, 7, 7]
    assert "conv1.bias" not in weights                      # BN follows: no conv bias


def test_resnet18_logits_are_sane(resnet18):
    logits = run_inputs(resnet18, "resnet18")
    assert logits.shape == (8, 1000)
    assert_sane_logits(logits, centred=False)


def test_resnet18_calibration_matches_onnxruntime():
    """On the builder's own calibration batch every BN outputs mean 0 / std gamma per channel
    and the numpy trace and onnxruntime compute the same net."""
    model = zoo.build("resnet18", batch=4)
    calibration = np.random.default_rng([0, 0xCA1B]).standard_normal((4, 3, 224, 224), dtype=np.float32)
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    outputs = session(model, tuple(n.output[0] for n in bns)).run(None, {"data": calibration})
    logits, bn_values = outputs[0], outputs[1:]
    for node, value in zip(bns, bn_values):
        gamma = RESIDUAL_GAMMA if node.name.endswith("bn2") else 1.0
        np.testing.assert_allclose(value.mean(axis=(0, 2, 3)), 0.0, atol=2e-3 * gamma, err_msg=node.name)
        np.testing.assert_allclose(value.std(axis=(0, 2, 3)), gamma, rtol=2e-3, err_msg=node.name)
    assert np.isfinite(logits).all()


def test_resnet18_deterministic_and_weights_independent_of_batch(resnet18):
    assert zoo.build("resnet18", seed=0).SerializeToString() == resnet18.SerializeToString()
    batch2 = zoo.build("resnet18", batch=2)
    assert batch2.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    assert [i.SerializeToString() for i in batch2.graph.initializer] == \
           [i.SerializeToString() for i in resnet18.graph.initializer]


@pytest.mark.parametrize("opset", [11, 17])
def test_resnet18_other_opsets(resnet18, opset):
    model = zoo.build("resnet18", opset=opset)
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", opset)]
    x = {"data": noise((1, 3, 224, 224), 7)}
    np.testing.assert_allclose(session(model).run(None, x)[0], session(resnet18).run(None, x)[0],
                               rtol=1e-4, atol=1e-4)


def test_resnet34_structure_and_one_run():
    model = zoo.build("resnet34")
    onnx.checker.check_model(model, full_check=True)
    counts = op_counts(model)
    assert counts["Conv"] == 36 and counts["Add"] == 16 and counts["BatchNormalization"] == 36
    assert {"layer3.5.add", "layer4.2.conv2"} <= {n.name for n in model.graph.node}
    logits = session(model).run(None, {"data": noise((2, 3, 224, 224), 3)[:1]})[0]
    assert logits.shape == (1, 1000) and np.isfinite(logits).all() and 0.1 < logits.std() < 100
    assert 3.5e9 < zoo.macs(model) < 3.8e9


# -- MobileNet ---------------------------------------------------------------------------------

def test_mobilenet_v1():
    model = zoo.build("mobilenet_v1")
    onnx.checker.check_model(model, full_check=True)
    counts = op_counts(model)
    assert counts["Conv"] == 27 and counts["Clip"] == 27 and counts["Gemm"] == 1
    depthwise = [n for n in model.graph.node if n.name.endswith(".dw")]
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    assert len(depthwise) == 13
    for node in depthwise:
        group = next(a.i for a in node.attribute if a.name == "group")
        assert weights[f"{node.name}.weight"] == [group, 1, 3, 3] and group > 1
    assert weights["fc.weight"] == [1000, 1024]
    assert 5.4e8 < zoo.macs(model) < 6.0e8                      # the paper: 569 M
    assert_sane_logits(run_inputs(model, "mobilenet_v1"), centred=False)


def test_mobilenet_width_multiplier():
    model = zoo.build("mobilenet_v1", width=0.5, opset=11)
    onnx.checker.check_model(model, full_check=True)
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    assert weights["conv0.weight"] == [16, 3, 3, 3] and weights["fc.weight"] == [1000, 512]
    assert np.isfinite(session(model).run(None, {"data": noise((1, 3, 224, 224), 1)})[0]).all()


# -- small_cnn ---------------------------------------------------------------------------------

def test_small_cnn_covers_the_op_kinds(small):
    onnx.checker.check_model(small, full_check=True)
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Concat", "Add", "AveragePool", "Pad",
            "Mul", "GlobalAveragePool", "Flatten", "Gemm", "Softmax", "Reshape", "Transpose"} \
        <= set(op_counts(small))
    assert [o.name for o in small.graph.output] == ["probs"]
    pad = next(n for n in small.graph.node if n.op_type == "Pad")
    assert next(n for n in small.graph.node if pad.output[0] in n.input).op_type == "Conv"


def test_small_cnn_outputs_are_sane(small):
    probs = run_inputs(small, "small_cnn")
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert_sane_logits(np.log(probs))


def test_small_cnn_batch_matches_single_images(small):
    x = noise((3, 3, 32, 32), 5)
    batched = session(zoo.build("small_cnn", batch=3)).run(None, {"data": x})[0]
    single = session(small)
    for i in range(3):
        np.testing.assert_allclose(batched[i:i + 1], single.run(None, {"data": x[i:i + 1]})[0],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", range(11, 22))
def test_small_cnn_every_opset(small, opset):
    model = zoo.build("small_cnn", opset=opset)
    onnx.checker.check_model(model, full_check=True)
    x = {"data": noise((1, 3, 32, 32), 9)}
    np.testing.assert_allclose(session(model).run(None, x)[0], session(small).run(None, x)[0],
                               rtol=1e-5, atol=1e-6)


def test_seed_changes_the_weights(small):
    other = zoo.build("small_cnn", seed=1)
    assert zoo.build("small_cnn", seed=0).SerializeToString() == small.SerializeToString()
    assert other.SerializeToString() != small.SerializeToString()


# -- registry, macs ----------------------------------------------------------------------------

def test_registry(tmp_path):
    assert zoo.NAMES == ("resnet18", "resnet34", "mobilenet_v1", "small_cnn", "digits_cnn")
    assert zoo.input_shape("resnet18", batch=2) == (2, 3, 224, 224)
    assert zoo.input_shape("small_cnn") == (1, 3, 32, 32)
    assert zoo.input_shape("digits_cnn", 5) == (5, 1, 8, 8)
    path = tmp_path / "small.onnx"
    saved = zoo.save("small_cnn", path, seed=3)
    assert onnx.load(str(path)).SerializeToString() == saved.SerializeToString()
    with pytest.raises(ValueError, match="unknown zoo model"):
        zoo.build("vgg16")
    for bad in (10, 22):
        with pytest.raises(ValueError, match="opset"):
            zoo.build("small_cnn", opset=bad)


def test_macs(resnet18, small):
    assert 1.7e9 <= zoo.macs(resnet18) <= 1.9e9
    assert zoo.macs(zoo.build("small_cnn", batch=4)) == 4 * zoo.macs(small)
    # small_cnn by hand: stem, two branches, residual conv, down conv, fc
    expected = (32 * 32 * 16 * 27 + 16 * 16 * 16 * 16 + 16 * 16 * 16 * 144
                + 16 * 16 * 32 * 288 + 4 * 4 * 64 * 288 + 64 * 10)
    assert zoo.macs(small) == expected
