"""The quantization recipe chosen per model: the knobs left "auto" are set by the network's own outputs.

Three choices each win on some real networks and lose on others (README, issue 16): the calibration
method (max, percentile, mse), the wide residual pair (wide_residual.py) and GPTQ weight rounding
(weight_rounding.py).  No fixed setting is best for every network, so, as AIMET's AutoQuant does, the
compiler tries them on the network it compiles: each candidate recipe is the whole int8 graph
(`build.float_and_int8`), run on the host interpreter (the accelerator's bits) over the calibration
samples, and judged against the float graph's outputs by the relative squared error
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
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from vtakit.compiler.quant.calibration import METHODS
from vtakit.compiler.quant.exponent_search import AGREEMENT, Progress, float_outputs, output_cosine, sample_errors
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.ir import Graph
from vtakit.compiler.quant.quantize import precision_plan
from vtakit.compiler.quant.techniques.wide_residual import MODES as WIDE_MODES, mark, wide_pairs
from vtakit.compiler.quant.techniques.weight_rounding import MODES as ROUNDING_MODES
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig

AUTO = "auto"
"""The value of a knob the search sets; compile_module's default for all three."""
MIN_GAIN = 0.05
"""A change is accepted when it lowers the mean output error on the calibration samples by at least this
fraction (5 %): smaller gains on a few samples are noise, and a recipe changes every layer of the network."""
MAX_PASSES = 3
CALIBRATIONS = ("max", "percentile", "mse")
"""The calibration methods the search tries (kl lost on every real network; "search" is its own option)."""


@dataclass(frozen=True)
class Recipe:
    calibration: str = "max"
    wide_residual: str = "off"
    weight_rounding: str = "nearest"

    def options(self) -> dict[str, str]:
        """compile_module's keywords that pin this recipe."""
        return asdict(self)

    def label(self) -> str:
        return f"calibration {self.calibration}, wide residual {self.wide_residual}, " \
               f"weight rounding {self.weight_rounding}"


FALLBACK = Recipe()
"""The recipe where nothing is searched: each knob's value before the search existed."""


@dataclass(frozen=True)
class RecipeSearch:
    chosen: dict[str, str]  # knob -> value, the recipe compiled
    start: dict[str, str]  # the recipe the search started from (FALLBACK, with the knobs given by hand)
    searched: tuple[str, ...]  # the knobs the search could move
    error_before: float  # mean relative squared output error of the starting recipe
    error_after: float
    cosine_before: float  # mean output cosine on the calibration samples
    cosine_after: float
    trials: tuple[tuple[str, float, float], ...]  # (recipe label, error, fraction of samples it lowered)
    evaluated: int  # recipes quantized and run (a recipe met again is not)
    failed: dict[str, str]  # recipe label -> the CompileError it met (such a recipe is never chosen)
    seconds: float


def improves(errors: np.ndarray, base: np.ndarray) -> bool:
    """Whether per-sample output errors `errors` beat `base` by the search's rule (module docstring)."""
    return bool(np.mean(errors) <= np.mean(base) * (1 - MIN_GAIN) and np.mean(errors < base) >= AGREEMENT)


def check_knob(name: str, value: str) -> str:
    """One clear error for an unknown value of a recipe knob ("auto" or one of the knob's own values)."""
    what, allowed = {"calibration": ("calibration method", METHODS), "wide_residual": ("wide_residual mode", WIDE_MODES),
                     "weight_rounding": ("weight rounding", ROUNDING_MODES)}[name]
    if value != AUTO and value not in allowed:
        raise CompileError(f"unknown {what} {value!r}; use {AUTO} or one of {', '.join(allowed)}")
    return value


def _forms_wide_pairs(g: Graph, cfg: HwConfig) -> bool:
    """Whether wide_residual "on" would widen any conv of `g` on `cfg` (quantize's own pairing)."""
    marked = g.copy()
    mark(marked, cfg, "on")
    plan = precision_plan(marked)
    return bool(wide_pairs(marked, plan.int8, plan.wide))


def candidate_values(g: Graph, cfg: HwConfig, requant: str, knobs: dict[str, str],
                     searchable: bool = True) -> dict[str, tuple[str, ...]]:
    """knob -> the values the search may give it, the fallback's first (one value: the knob is fixed).
    `searchable` False (made-up samples) and QDQ models leave every auto knob at the fallback."""
    auto = {k for k, v in knobs.items() if v == AUTO}
    values = {k: (getattr(FALLBACK, k),) if k in auto else (v,) for k, v in knobs.items()}
    if not searchable or g.notes.get("qdq"):
        return values
    if "calibration" in auto:
        values["calibration"] = CALIBRATIONS
    if "wide_residual" in auto and _forms_wide_pairs(g, cfg):
        values["wide_residual"] = ("off", "on")
    if "weight_rounding" in auto and requant == "pow2":
        values["weight_rounding"] = ("nearest", "gptq")
    return values


def float_and_int8_auto(g: Graph, cfg: HwConfig, calibrate, *, seed: int = 0, calibration: str = AUTO,
                        wide_residual: str = AUTO, weight_rounding: str = AUTO,
                        keep_float_until: float | None = None, progress: Progress | None = None,
                        **options: Any) -> tuple[Graph, Graph, dict[str, Any]]:
    """`build.float_and_int8` for the optimized float graph `g` (not changed) with the auto knobs chosen
    (module docstring); `options`: float_and_int8's other keywords.  The notes gain "recipe"."""
    from vtakit.compiler.pipeline import calibration_samples, float_and_int8  # build imports this module

    knobs = dict(calibration=check_knob("calibration", calibration),
                 wide_residual=check_knob("wide_residual", wide_residual),
                 weight_rounding=check_knob("weight_rounding", weight_rounding))
    samples, synthetic = calibration_samples(g, calibrate, seed)
    values = candidate_values(g, cfg, options.get("requant", "pow2"), knobs, searchable=not synthetic)

    weights_cache: dict = {}  # the weight-side work of a recipe, shared by those that differ in the rest

    def quantized(recipe: Recipe, keep_until: float | None = None):
        marked = g.copy()
        mark(marked, cfg, recipe.wide_residual)
        fg, q, notes = float_and_int8(marked, samples, calibration=recipe.calibration,
                                      weight_rounding=recipe.weight_rounding, keep_float_until=keep_until,
                                      progress=progress, weights_cache=weights_cache, **options)
        notes["synthetic"] = synthetic  # the samples come in as feeds, made up or not
        return fg, q, notes

    start = Recipe(**{k: v[0] for k, v in values.items()})
    searched = tuple(k for k, v in values.items() if len(v) > 1)
    if not searched:
        return quantized(start, keep_float_until)
    t0 = time.perf_counter()
    want = float_outputs(g, samples)
    tried: dict[Recipe, tuple[np.ndarray, float]] = {}  # recipe -> (per-sample errors, mean output cosine)
    results: dict[Recipe, tuple] = {}  # (float graph, int8 graph, notes) of the recipes still in the running

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
    if keep_float_until is not None:
        fg, q, notes = quantized(current, keep_float_until)
    else:  # a recipe met again in a later pass may be chosen after its graphs were dropped: made again
        fg, q, notes = results[current] if current in results else quantized(current)
    notes["recipe"] = asdict(RecipeSearch(asdict(current), asdict(start), searched, float(np.mean(tried[start][0])),
                                          float(np.mean(errors)), tried[start][1], cosine, tuple(log),
                                          len(tried), failed, time.perf_counter() - t0))
    return fg, q, notes


def recipe_lines(notes: dict) -> list[str]:
    """What the search chose, for the compile output and reports."""
    r = notes.get("recipe")
    if not r:
        return []
    chosen = Recipe(**r["chosen"])
    moved = [k for k in r["searched"] if r["chosen"][k] != getattr(FALLBACK, k)]
    what = ", ".join(f"{k.replace('_', ' ')} {r['chosen'][k]}" for k in moved) or "the fallback recipe"
    lines = [f"quantization recipe (auto, {r['evaluated']} tried in {r['seconds']:.1f} s): {what}; "
             f"calibration-sample output cosine {r['cosine_before']:.4f} -> {r['cosine_after']:.4f} "
             f"({chosen.label()})"]
    lines += [f"  not taken, it does not compile here: {label}: {why}" for label, why in r.get("failed", {}).items()]
    return lines


def recipe_table(notes: dict):
    """The recipes the search judged, in order, as a rich table (`vtakit report --accuracy`); None without a
    search.  Each trial is judged against the recipe in the lead at that moment."""
    from rich.table import Table

    r = notes.get("recipe")
    if not r:
        return None
    table = Table(title="quantization recipes judged on the calibration samples (auto)")
    for column in ("recipe", "output error", "samples it lowered", "taken"):
        table.add_column(column, justify="left" if column == "recipe" else "right")
    chosen, start = Recipe(**r["chosen"]).label(), Recipe(**r["start"]).label()
    table.add_row(f"{start} (start)", f"{r['error_before']:.5f}", "", "yes" if chosen == start else "")
    for label, error, lowered in r["trials"]:
        table.add_row(label, f"{error:.5f}", f"{lowered:.0%}", "yes" if label == chosen else "")
    for label, why in r.get("failed", {}).items():
        table.add_row(label, "does not compile", "", why)
    return table
