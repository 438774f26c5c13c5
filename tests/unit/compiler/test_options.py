"""Compile options as data (compiler/options.py) and the typed compile notes (compiler/module/notes.py)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

import vtakit
from vtakit.cli import build_parser
from vtakit.compiler import zoo
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.module.notes import CompileNotes, QuantNotes
from vtakit.compiler.options import CHOICES, CalibrationMethod, CompileOptions, QuantOptions, Target
from vtakit.compiler.pipeline import compile_module
from vtakit.errors import CompileError


@pytest.fixture(scope="module")
def digits():
    rng = np.random.default_rng(5)
    return zoo.build("digits_cnn"), [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("option", sorted(CHOICES))
def test_a_bad_value_of_any_option_is_one_error_naming_it_and_its_values(option, digits):
    model, cal = digits
    with pytest.raises(CompileError) as e:
        compile_module(model, "pynq", calibrate=cal, **{option: "bogus"})
    values = ", ".join(CHOICES[option].values())
    assert str(e.value) == f"unknown {option} 'bogus'; use one of {values}"
    with pytest.raises(CompileError, match=f"unknown {option} 'int'"):  # not a string at all
        CompileOptions.of(**{option: 3})


def test_unknown_keywords_and_wrong_types_are_one_error_each():
    with pytest.raises(CompileError, match="unknown compile option 'calibrate_method'; use one of bias_correction, "):
        CompileOptions.of(calibrate_method="max")
    with pytest.raises(CompileError, match="bias_correction must be true or false, got 'yes'"):
        QuantOptions(bias_correction="yes")  # type: ignore[arg-type]
    with pytest.raises(CompileError, match="keep_float takes node names"):
        QuantOptions(keep_float="conv1")  # type: ignore[arg-type]
    with pytest.raises(CompileError, match="target cpu runs every node on the CPU"):
        CompileOptions(target="cpu", host="cuda")  # type: ignore[arg-type]


def test_spellings_parse_into_enums_and_keywords_map_onto_the_fields():
    opts = CompileOptions.of(target="cpu", calibration="mse", partition_options={"first_conv": "host"}, seed=3)
    assert opts.target is Target.CPU and opts.quant.calibration is CalibrationMethod.MSE and opts.quant.seed == 3
    assert opts.partition == {"first_conv": "host"}
    assert CompileOptions.of(opts, calibration="max").quant == QuantOptions(calibration="max", seed=3)
    assert json.dumps({"calibration": opts.quant.calibration}) == '{"calibration": "mse"}'  # JSON keeps the spelling
    assert f"{opts.quant.calibration}" == "mse"


def test_an_options_object_and_keywords_compile_the_same_module(digits):
    model, cal = digits
    by_keywords = compile_module(model, "pynq", calibrate=cal, calibration="percentile", weight_rounding="nearest")
    options = CompileOptions(quant=QuantOptions(calibration="percentile", weight_rounding="nearest"))  # type: ignore[arg-type]
    by_object = vtakit.compile(model, "pynq", options, calibrate=cal)
    for name, value in by_keywords.graph.consts.items():
        np.testing.assert_array_equal(value, by_object.graph.consts[name])
    assert [t.program.words.tobytes() for t in by_keywords.vta_tasks()] == \
        [t.program.words.tobytes() for t in by_object.vta_tasks()]
    notes = by_object.notes.calibration
    assert isinstance(notes, QuantNotes) and notes.method is CalibrationMethod.PERCENTILE
    assert notes.recipe is None  # two knobs pinned and no residual add to widen: nothing to search


def _option_choices(parser: argparse.ArgumentParser, command: str) -> dict[str, tuple[str, ...]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: tuple(a.choices) for a in sub.choices[command]._actions if a.choices is not None}


def test_the_cli_takes_its_choices_from_the_enums():
    parser = build_parser()
    for command, options in (("compile", sorted(CHOICES)),
                             ("report", sorted(set(CHOICES) - {"target", "host"}))):
        choices = _option_choices(parser, command)
        assert {o: choices[o] for o in options} == {o: CHOICES[o].values() for o in options}, command


def test_notes_are_typed_and_survive_a_save_and_a_load(digits, tmp_path):
    model, cal = digits
    module = compile_module(model, "pynq", calibrate=cal, keep_float_until=0.999)
    notes = module.notes
    assert isinstance(notes, CompileNotes) and notes.source_nodes > 0 and notes.compile_s > 0
    assert notes.calibration is not None and notes.calibration.keep_float_auto is not None
    assert notes.calibration.recipe is not None and notes.calibration.range_scale is not None
    loaded = CompiledModule.load(module.save(tmp_path / "d.vtamod"))
    assert loaded.notes == notes
    manifest = json.loads(json.dumps(notes.to_dict()))  # the manifest's "notes": field names as keys
    assert set(manifest["calibration"]) >= {"samples", "synthetic", "method", "recipe", "keep_float_auto"}
    assert CompileNotes.from_dict(manifest) == notes


@pytest.mark.parametrize("change, message", [
    (lambda d: d["calibration"].update(samples="8"), "calibration.samples must be an integer, got '8'"),
    (lambda d: d["calibration"].update(method="best"), "unknown calibration 'best'"),
    (lambda d: d["calibration"]["recipe"].pop("chosen"), "missing field 'calibration.recipe.chosen'"),
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d["calibration"]["range_scale"].update(groups=[]), "calibration.range_scale"),
])
def test_damaged_notes_are_one_error_naming_the_field(digits, change, message):
    model, cal = digits
    d = json.loads(json.dumps(compile_module(model, "pynq", calibrate=cal).notes.to_dict()))
    change(d)
    with pytest.raises(CompileError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        CompileNotes.from_dict(d)
    assert "\n" not in str(e.value)
