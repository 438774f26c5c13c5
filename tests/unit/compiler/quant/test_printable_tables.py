"""The quantization tables print as text from Python (`print(report.table())`), not as
`<rich.table.Table object>`, and still render through a rich Console."""

from __future__ import annotations

import io

from rich.console import Console

from vtakit.compiler.module.notes import QuantNotes, RecipeSearch
from vtakit.compiler.options import CalibrationMethod, EqualizeMode, RequantMode, WeightRoundingMode
from vtakit.compiler.quant.accuracy import AccuracyReport, LayerAccuracy
from vtakit.compiler.quant.recipe import FALLBACK, Recipe, recipe_table


def _printed(table) -> str:
    out = io.StringIO()
    print(table, file=out)
    return out.getvalue()


def test_the_accuracy_report_table_prints_as_text():
    report = AccuracyReport([LayerAccuracy("conv1", "Conv", "int8", 5, 31.25, 0.99912, 0.0015),
                             LayerAccuracy("fc", "Dense", "int32", 9, 24.5, 0.99501, 0.0)])
    text = _printed(report.table())
    assert "rich.table" not in text
    assert "SQNR dB" in text and "clipped %" in text
    assert "conv1" in text and "31.2" in text and "0.99912" in text and "0.150" in text
    rendered = io.StringIO()
    Console(file=rendered, width=140, color_system=None).print(report.table())
    assert "SQNR dB" in rendered.getvalue()


def test_the_recipe_table_prints_as_text():
    tried = Recipe(calibration="mse").label()
    search = RecipeSearch(chosen=Recipe(calibration="mse").options(), start=FALLBACK.options(),
                          searched=("calibration",), error_before=0.0125, error_after=0.0061, cosine_before=0.991,
                          cosine_after=0.996, trials=((tried, 0.0061, 0.75),), evaluated=2,
                          failed={"calibration kl": "too large"}, seconds=1.5)
    notes = QuantNotes(8, False, CalibrationMethod.MSE, EqualizeMode.OFF, False, RequantMode.POW2,
                       WeightRoundingMode.NEAREST, 1.5, recipe=search)
    text = _printed(recipe_table(notes))
    assert "rich.table" not in text
    assert "output error" in text and "samples it lowered" in text
    assert "0.01250" in text and "0.00610" in text and "75%" in text and "does not compile" in text
