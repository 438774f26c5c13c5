"""The quantization recipe chosen per model: the knobs left "auto" are set by the network's own outputs.

Three choices each win on some real networks and lose on others (docs/quantization.md): the calibration
method (max, percentile, mse), the wide residual pair (wide_residual.py) and GPTQ weight rounding
(weight_rounding.py).  No fixed setting is best for every network, so, as AIMET's AutoQuant does, the
compiler tries them on the network it compiles: each candidate recipe is the whole int8 graph
(`int8.float_and_int8`), run on the host interpreter (the accelerator's bits) over the calibration
samples, and judged against the float graph's outputs by the relative squared error, each output (and each
channel of a detector's or segmenter's output) normalised by its own energy so that all count alike
(`exponent_search.sample_errors`).

The search is a coordinate descent from `FALLBACK`: each pass tries every other value of every auto
knob from the recipe accepted so far, and accepts the best trial only if it lowers the mean output error
by at least `MIN_GAIN` and lowers it on at least `exponent_search.AGREEMENT` of the samples (a change one
or two samples like is noise, or GPTQ fitting the calibration samples: RapidOCR's recognizer).  Passes
repeat until one accepts nothing (at most `MAX_PASSES`), since the knobs interact (on the centred ResNet-18
mse only wins once the residual pairs are wide).

Where there is nothing to judge by, the auto knobs take `FALLBACK` without a search: calibration samples
the compiler made up (no `calibrate` given), and QDQ models (their own scales decide).  A knob set to a
value is kept as given.  With `keep_float_until`, the layers are chosen after the recipe.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from vtakit.compiler.module.notes import QuantNotes, RecipeSearch
from vtakit.compiler.options import (RECIPE_KNOBS, CalibrationMethod, Choice, QuantOptions, RequantMode, WeightRoundingMode, WideResidualMode)
from vtakit.compiler.quant.exponent_search import (AGREEMENT, Progress, float_outputs, output_cosine, output_errors,
                                                   sample_errors)
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.ir import Graph
from vtakit.compiler.quant.precision import precision_plan
from vtakit.compiler.quant.techniques.fixed_point import check_requant
from vtakit.compiler.quant.techniques.registry import mark_graph
from vtakit.compiler.quant.techniques.wide_residual import mark, wide_pairs
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from vtakit.compiler.quant.int8 import calibration_samples, float_and_int8
from vtakit.compiler.quant.recipe import Recipe, fallback


MIN_GAIN = 0.05
"""A change is accepted when it lowers the mean output error on the calibration samples by at least this
fraction (5 %): smaller gains on a few samples are noise, and a recipe changes every layer of the network."""
MAX_PASSES = 3
CALIBRATIONS = (CalibrationMethod.MAX, CalibrationMethod.PERCENTILE, CalibrationMethod.MSE)
"""The calibration methods the search tries (kl lost on every real network; "search" is its own option)."""


def improves(errors: np.ndarray, base: np.ndarray) -> bool:
    """Whether per-sample output errors `errors` beat `base` by the search's rule (module docstring)."""
    return bool(np.mean(errors) <= np.mean(base) * (1 - MIN_GAIN) and np.mean(errors < base) >= AGREEMENT)


def _forms_wide_pairs(g: Graph, cfg: HwConfig) -> bool:
    """Whether wide_residual "on" would widen any conv of `g` on `cfg` (quantize's own pairing)."""
    marked = g.copy()
    mark(marked, cfg, "on")
    plan = precision_plan(marked)
    return bool(wide_pairs(marked, plan.int8, plan.wide))


def candidate_values(g: Graph, cfg: HwConfig, options: QuantOptions,
                     searchable: bool = True) -> dict[str, tuple[Choice, ...]]:
    """knob -> the values the search may give it, the fallback's first (one value: the knob is fixed);
    `options.requant` as resolved for `cfg`.  `searchable` False (made-up samples) and QDQ models leave
    every auto knob at the fallback."""
    auto = options.auto_knobs()
    values: dict[str, tuple[Choice, ...]] = {k: (getattr(fallback(options), k),) for k in RECIPE_KNOBS}
    if not searchable or g.notes.get("qdq"):
        return values
    if "calibration" in auto:
        values["calibration"] = CALIBRATIONS
    if "wide_residual" in auto and _forms_wide_pairs(g, cfg):
        values["wide_residual"] = (WideResidualMode.OFF, WideResidualMode.ON)
    if "weight_rounding" in auto and options.requant is RequantMode.POW2:
        values["weight_rounding"] = (WeightRoundingMode.NEAREST, WeightRoundingMode.GPTQ)
    return values


def float_and_int8_auto(g: Graph, cfg: HwConfig, calibrate, options: QuantOptions | None = None, *,
                        progress: Progress | None = None, **keywords: Any) -> tuple[Graph, Graph, QuantNotes]:
    """`int8.float_and_int8` for the optimized float graph `g` (not changed) with the auto knobs chosen
    (module docstring): `options` with `keywords` set, requant resolved for `cfg`.  The notes gain `recipe`
    where the search ran."""
    options = QuantOptions.of(options, **keywords)
    options = replace(options, requant=check_requant(options.requant, cfg.alu_mul, cfg.label))
    samples, synthetic = calibration_samples(g, calibrate, options.seed)
    values = candidate_values(g, cfg, options, searchable=not synthetic)

    weights_cache: dict = {}  # the weight-side work of a recipe, shared by those that differ in the rest

    def quantized(recipe: Recipe, keep_until: float | None = None) -> tuple[Graph, Graph, QuantNotes]:
        opts = replace(options, **recipe.options(), keep_float_until=keep_until)
        marked = g.copy()
        mark_graph(marked, cfg, opts)  # the MARK techniques (the wide residual note), per recipe
        fg, q, notes = float_and_int8(marked, samples, opts, progress=progress, weights_cache=weights_cache)
        return fg, q, replace(notes, synthetic=synthetic)  # the samples come in as feeds, made up or not

    start = Recipe(**{k: v[0] for k, v in values.items()})
    searched = tuple(k for k, v in values.items() if len(v) > 1)
    if not searched:
        return quantized(start, options.keep_float_until)
    t0 = time.perf_counter()
    want = float_outputs(g, samples)
    tried: dict[Recipe, tuple[np.ndarray, float]] = {}  # recipe -> (per-sample errors, mean output cosine)
    per_output: dict[Recipe, dict[str, float]] = {}  # recipe -> each output's error (exponent_search.output_errors)
    results: dict[Recipe, tuple[Graph, Graph, QuantNotes]] = {}  # the recipes still in the running

    failed: dict[str, str] = {}  # recipe label -> the one error line a trial recipe compiled to

    def judge(recipe: Recipe) -> np.ndarray:
        if recipe not in tried:
            if progress is not None:
                progress("quantization recipe", len(tried), len(tried) + 1)
            try:
                result = quantized(recipe)
            except CompileError as e:  # a choice this network cannot take is not taken; the start must work
                if recipe == start:
                    raise
                failed[recipe.label()] = str(e)
                tried[recipe] = (np.full(len(samples), np.inf), 0.0)
                return tried[recipe][0]
            got = [run_graph(result[1], dict(s)) for s in samples]
            tried[recipe], results[recipe] = (sample_errors(want, got), output_cosine(want, got)), result
            per_output[recipe] = output_errors(want, got)
        return tried[recipe][0]

    current, log = start, []
    for _ in range(MAX_PASSES):
        base = judge(current)
        best: tuple[float, Recipe] | None = None
        for knob in searched:
            for value in values[knob]:
                trial = replace(current, **{knob: value})
                if trial == current:
                    continue
                errors = judge(trial)
                if trial.label() in failed:
                    continue
                log.append((trial.label(), float(np.mean(errors)), float(np.mean(errors < base))))
                if improves(errors, base) and (best is None or np.mean(errors) < best[0]):
                    best = (float(np.mean(errors)), trial)
        if best is not None:
            current = best[1]
        for recipe in [r for r in results if r != current]:  # a big network's int8 graphs are not all kept
            del results[recipe]
        if best is None:
            break
    if progress is not None:
        progress("quantization recipe", len(tried), len(tried))
    (errors, cosine) = tried[current]
    if options.keep_float_until is not None:
        fg, q, notes = quantized(current, options.keep_float_until)
    else:  # a recipe met again in a later pass may be chosen after its graphs were dropped: made again
        fg, q, notes = results[current] if current in results else quantized(current)
    search = RecipeSearch(current.options(), start.options(), searched, float(np.mean(tried[start][0])),
                          float(np.mean(errors)), tried[start][1], cosine, tuple(log), len(tried), failed,
                          time.perf_counter() - t0, per_output.get(current, {}))
    return fg, q, replace(notes, recipe=search)
