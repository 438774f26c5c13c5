"""The quantization recipe chosen per model (compiler/quant/recipe.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.smooth_inputs import smooth_images

from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.pipeline import optimize
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.options import QuantOptions
from vtakit.compiler.quant.recipe import FALLBACK, Recipe, recipe_lines, recipe_table
from vtakit.compiler.quant.recipe_search import MIN_GAIN, candidate_values, improves
from vtakit.compiler.module.report import calibration_lines
from vtakit.compiler.zoo import build as zoo_build
from vtakit.compiler.quant.techniques.wide_residual import wide_bits
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig

C = 16
POW2, MULTIPLIER = QuantOptions(requant="pow2"), QuantOptions(requant="multiplier")  # the three knobs "auto"


_smooth = smooth_images


def _residual_model():
    """x -> 3x3/2 edge conv + ReLU -> [3x3 conv + ReLU -> 3x3 conv] + skip -> ReLU -> 1x1 conv -> y:
    a stem whose folded kernels take differences of neighbours (GPTQ's case) and a residual block (the
    wide pair's)."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((C, 3, 3, 3)).astype(np.float32)
    w1 -= w1.mean(axis=(1, 2, 3), keepdims=True)

    def const(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [numpy_helper.from_array(w1, "w1"), const("b1", (C,), 0.1), const("wa", (C, C, 3, 3), 0.12),
             const("ba", (C,), 0.1), const("wb", (C, C, 3, 3), 0.12), const("bb", (C,), 0.1),
             const("wp", (4, C, 1, 1), 0.3)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], strides=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "wa", "ba"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wb", "bb"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("Conv", ["sr", "wp"], ["y"])]
    graph = helper.make_graph(nodes, "recipe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _graph(model):
    return optimize(import_onnx(model))


def test_a_change_must_lower_the_mean_error_enough_and_on_most_samples():
    base = np.array([1.0, 1.0, 1.0, 1.0])
    assert improves(np.array([0.8, 0.8, 0.8, 0.8]), base)
    assert not improves(base * (1 - MIN_GAIN / 2), base)  # too small a gain
    assert not improves(np.array([0.1, 0.1, 1.2, 1.2]), base)  # two samples like it, two do not
    assert improves(np.array([0.1, 0.5, 0.9, 1.1]), base)  # three of four


def test_the_search_tries_only_what_can_change_the_program():
    g, pynq, mul = _graph(_residual_model()), HwConfig.load("pynq"), HwConfig.load("pynq_mul")
    assert candidate_values(g, pynq, POW2) == dict(
        calibration=("max", "percentile", "mse"), wide_residual=("off", "on"), weight_rounding=("nearest", "gptq"))
    # multipliers keep float weight scales (no GPTQ); a config whose wide pairs keep no extra bits has none to try
    values = candidate_values(g, mul, MULTIPLIER)
    assert values["weight_rounding"] == ("nearest",)
    assert values["wide_residual"] == (("off", "on") if wide_bits(mul) else ("off",))
    acc8 = HwConfig.load("pynq").replace(acc8_load=True)  # the skip added by an ALU ADD: no free 2**k
    assert wide_bits(acc8) == 0 and candidate_values(g, acc8, POW2)["wide_residual"] == ("off",)
    # a knob given is kept
    values = candidate_values(g, pynq, QuantOptions(requant="pow2", calibration="kl", wide_residual="off"))
    assert values["calibration"] == ("kl",) and values["wide_residual"] == ("off",)
    # a QDQ model's own scales decide: nothing searched
    g.notes["qdq"] = {"x": 1.0}
    assert all(len(v) == 1 for v in candidate_values(g, pynq, POW2).values())


def test_without_residual_adds_no_wide_pair_is_tried():
    g = _graph(zoo_build("mobilenet_v1"))
    assert candidate_values(g, HwConfig.load("pynq"), POW2)["wide_residual"] == ("off",)


def test_auto_picks_a_recipe_by_the_outputs_and_the_simulators_agree():
    model, cal = _residual_model(), _smooth(8, 0)
    module = compile_module(model, "pynq", calibrate=cal)
    notes = module.notes.calibration
    r = notes.recipe
    assert set(r.searched) == {"calibration", "wide_residual", "weight_rounding"}
    assert r.error_after <= r.error_before and r.cosine_after >= r.cosine_before
    assert r.trials and all(0.0 <= lowered <= 1.0 for _, _, lowered in r.trials)
    chosen = Recipe(**r.chosen)
    if chosen != FALLBACK:  # a change was accepted: it lowered the error by the rule
        assert r.error_after <= r.error_before * (1 - MIN_GAIN)
    assert notes.method == chosen.calibration
    x = _smooth(1, 99)[0]
    np.testing.assert_array_equal(module.run(x, device="fsim")["y"], module.run(x, device="cpu")["y"])
    line = recipe_lines(notes)[0]
    assert line.startswith("quantization recipe (auto") and chosen.label() in line
    assert line in calibration_lines(notes)
    # the recipe it chose, given by hand, compiles to the same program
    pinned = compile_module(model, "pynq", calibrate=cal, **r.chosen)
    assert pinned.notes.calibration.recipe is None
    for t, v in module.graph.consts.items():
        np.testing.assert_array_equal(v, pinned.graph.consts[t])


def test_a_change_that_did_not_pay_alone_pays_after_another():
    """On this network GPTQ alone lowers the error on 5 of 8 samples (rejected), the wide pair on all 8
    (accepted); from the wide pair GPTQ then lowers it on all 8: the second pass takes it."""
    module = compile_module(_residual_model(), "pynq", calibrate=_smooth(8, 0))
    r = module.notes.calibration.recipe
    assert r.chosen == dict(calibration="max", wide_residual="on", weight_rounding="gptq"), r
    trials = {label: lowered for label, _, lowered in r.trials}
    alone = Recipe(weight_rounding="gptq").label()
    assert trials[alone] < 0.75 and trials[Recipe(wide_residual="on", weight_rounding="gptq").label()] == 1.0
    assert r.evaluated < len(r.trials)  # recipes met again are not quantized again
    assert module.notes.calibration.weight_rounding == "gptq"


def test_made_up_samples_give_the_fallback_without_a_search():
    module = compile_module(_residual_model(), "pynq")
    notes = module.notes.calibration
    assert notes.synthetic and notes.recipe is None
    assert (notes.method, notes.weight_rounding) == (FALLBACK.calibration, FALLBACK.weight_rounding)


@pytest.mark.parametrize("knob,value", [("calibration", "best"), ("wide_residual", "yes"), ("weight_rounding", "")])
def test_an_unknown_knob_value_is_one_clear_error(knob, value):
    with pytest.raises(CompileError, match=f"unknown {knob} '{value}'; use one of auto, "):
        compile_module(_residual_model(), "pynq", calibrate=_smooth(2, 0), **{knob: value})




def test_the_cli_prints_the_chosen_recipe_and_takes_auto(tmp_path, capsys):
    import onnx

    from vtakit.cli import main

    onnx.save(_residual_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", np.stack(_smooth(4, 0)))
    args = ["compile", str(tmp_path / "m.onnx"), "--config", "pynq", "--calibrate", str(tmp_path / "cal.npy"),
            "-o", str(tmp_path / "m.vtamod")]
    assert main(args) == 0
    assert "quantization recipe (auto, " in capsys.readouterr().out
    assert main(args + ["--calibration", "max", "--wide-residual", "off", "--weight-rounding", "auto"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "quantization recipe (auto, " in out and "wide residual off" in out


def test_the_weight_side_work_is_shared_between_recipes_and_changes_nothing():
    """float_and_int8's weights_cache (what recipe.py passes): recipes that differ in the calibration method or
    the wide residual note reuse one `weights_for_int8` and get the int8 graph they would get alone."""
    from vtakit.compiler.quant.int8 import float_and_int8
    from vtakit.compiler.quant.exponent_search import first_difference
    from vtakit.compiler.quant.techniques.wide_residual import mark

    g = _graph(_residual_model())
    samples = [{"x": x} for x in _smooth(4, 0)]
    cache: dict = {}
    for wide in ("on", "off"):
        for method in ("mse", "max"):
            marked = g.copy()
            mark(marked, HwConfig.load("pynq"), wide)
            shared = float_and_int8(marked, samples, QuantOptions(calibration=method), weights_cache=cache)[1]
            alone = float_and_int8(marked, samples, calibration=method)[1]
            assert first_difference(shared, alone) is None, (wide, method)
    assert len(cache) == 1


def test_a_recipe_that_does_not_compile_is_left_out_and_named(monkeypatch):
    """A choice the network cannot take (here GPTQ made to fail) must not fail a compile the fallback passes."""
    from vtakit.compiler.quant.techniques import weight_rounding

    def no_gptq(*args, **kwargs):
        raise CompileError("GPTQ cannot round this layer", node="c", op="Conv")

    monkeypatch.setattr(weight_rounding, "plan_rounding", no_gptq)
    module = compile_module(_residual_model(), "pynq", calibrate=_smooth(8, 0))
    r = module.notes.calibration.recipe
    assert r.chosen["weight_rounding"] == "nearest" and r.failed
    assert all("GPTQ cannot round this layer" in why for why in r.failed.values())
    assert not any("gptq" in label for label, _, _ in r.trials)
    assert any(line.startswith("  not taken, it does not compile here:") for line in recipe_lines(module.notes.calibration))
    with pytest.raises(CompileError, match="GPTQ cannot round"):  # asked for by name, it is an error
        compile_module(_residual_model(), "pynq", calibrate=_smooth(8, 0), weight_rounding="gptq")


def test_a_recipe_chosen_in_a_later_pass_after_its_graphs_were_dropped_is_made_again(monkeypatch):
    """Only the recipe in the lead keeps its graphs between passes.  mse, judged in the first pass (lower on
    only 2 of 4 samples than max) and dropped, wins the second against percentile (lower on 3 of 4): it is
    quantized again, not looked up."""
    from vtakit.compiler.quant import recipe_search

    errors = {"max": [1.0, 1.0, 1.0, 1.0], "percentile": [0.7, 0.7, 0.7, 1.1], "mse": [0.1, 0.1, 1.05, 1.05]}
    methods: list[str] = []
    float_and_int8 = recipe_search.float_and_int8

    def spy(g, samples, options, **kw):
        methods.append(options.calibration)
        return float_and_int8(g, samples, options, **kw)

    monkeypatch.setattr(recipe_search, "float_and_int8", spy)
    monkeypatch.setattr(recipe_search, "sample_errors", lambda want, got: np.array(errors[methods[-1]]))
    module = compile_module(_residual_model(), "pynq", calibrate=_smooth(4, 0), wide_residual="off",
                            weight_rounding="nearest")
    r = module.notes.calibration.recipe
    assert r.chosen["calibration"] == "mse" and module.notes.calibration.method == "mse"
    assert methods == ["max", "percentile", "mse", "mse"], methods


def test_report_accuracy_shows_every_recipe_judged(tmp_path, capsys):
    import onnx

    from vtakit.cli import main

    module = compile_module(_residual_model(), "pynq", calibrate=_smooth(8, 0))
    r = module.notes.calibration.recipe
    assert r.start == FALLBACK.options()
    table = recipe_table(module.notes.calibration)
    assert table.row_count == 1 + len(r.trials) + len(r.failed)
    assert recipe_table(None) is None
    onnx.save(_residual_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", np.stack(_smooth(4, 0)))
    assert main(["report", str(tmp_path / "m.onnx"), "--accuracy", "--calibrate", str(tmp_path / "cal.npy")]) == 0
    assert "quantization recipes judged on the calibration samples" in capsys.readouterr().out
