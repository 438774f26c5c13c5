"""The recipe search judges each output, and each channel of a detector's output, by its own scale."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.quant.exponent_search import output_errors, sample_errors
from vtakit.compiler.quant.recipe import recipe_lines
from vtakit.compiler.module.notes import QuantNotes, RecipeSearch
from vtakit.compiler.options import CalibrationMethod, EqualizeMode, RequantMode, WeightRoundingMode

RNG = np.random.default_rng(5)


def _head(boxes_noise: float, scores_noise: float) -> dict[str, np.ndarray]:
    """A YOLO-like head (1, 4 + 2, 50): box coordinates in 0-320 and class scores in 0-1, with noise."""
    want = np.concatenate([RNG.uniform(0, 320, (1, 4, 50)), RNG.uniform(0, 1, (1, 2, 50))], axis=1)
    noise = np.concatenate([RNG.standard_normal((1, 4, 50)) * boxes_noise, RNG.standard_normal((1, 2, 50)) * scores_noise],
                           axis=1)
    return {"want": want, "got": want + noise}


def test_scores_count_as_much_as_boxes_in_one_output():
    """Losing the class scores (10 % noise) must weigh more than a sub-pixel box jitter, though the boxes' absolute
    error is larger: each channel is normalised by its own energy."""
    lost_scores, jittered_boxes = _head(0.0, 0.1), _head(1.0, 0.0)
    err_scores = sample_errors([{"y": lost_scores["want"]}], [{"y": lost_scores["got"]}])[0]
    err_boxes = sample_errors([{"y": jittered_boxes["want"]}], [{"y": jittered_boxes["got"]}])[0]
    assert err_scores > 5 * err_boxes
    whole = lambda h: float(np.sum((h["got"] - h["want"]) ** 2) / np.sum(h["want"] ** 2))  # the old, one-tensor error
    assert whole(lost_scores) < whole(jittered_boxes)  # which is why the old rule chose wrongly


def test_each_output_counts_alike_and_a_classifier_keeps_its_plain_relative_error():
    big, small = RNG.standard_normal((1, 10)) * 100, RNG.standard_normal((1, 10)) * 0.01
    want = [{"big": big, "small": small}]
    got = [{"big": big * 1.01, "small": small * 1.1}]
    errors = output_errors(want, got)
    assert np.isclose(errors["big"], 1e-4) and np.isclose(errors["small"], 1e-2)
    assert np.isclose(sample_errors(want, got)[0], (1e-4 + 1e-2) / 2)


def test_the_chosen_recipes_output_errors_are_printed():
    search = RecipeSearch({"calibration": "max", "wide_residual": "off", "weight_rounding": "nearest"},
                          {"calibration": "max", "wide_residual": "off", "weight_rounding": "nearest"}, ("calibration",),
                          0.01, 0.01, 0.99, 0.99, (), 3, {}, 0.1, {"boxes": 1.5e-3, "scores": 2.0e-4})
    notes = QuantNotes(4, False, CalibrationMethod.MAX, EqualizeMode.OFF, True, RequantMode.POW2,
                       WeightRoundingMode.NEAREST, 0.1, recipe=search)
    assert any("boxes 1.50e-03, scores 2.00e-04" in line for line in recipe_lines(notes))
