"""Quantization's entry point: an optimized float graph to the int8 graph, by one recipe.

`float_and_int8` runs the quantizer's steps in order: the weight-side techniques (`weights_for_int8`:
equalization and bias correction, range scaling, channel fill, GPTQ rounding; each in `techniques/`),
calibration of the activation exponents (`calibration.py`, or `exponent_search.py` judged at the
outputs), the layers kept float, and the power-of-two rewrite (`quantize.py`).  `recipe_search.py`
calls it once per recipe when knobs are left "auto"; the pipeline's "quantize" step calls the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.options import EqualizeMode, QuantOptions, RangeScaleMode, RequantMode, WeightRoundingMode
from vtakit.compiler.quant.recipe import fallback
from vtakit.compiler.quant.techniques.wide_residual import WIDE_NOTE
from vtakit.compiler.ir import Graph
from vtakit.compiler.module.notes import ModelFactors, QdqNotes, QuantNotes
from vtakit.compiler.quant.calibration import calibrate as run_calibration
from vtakit.compiler.quant.techniques.equalize import correct_bias, equalize as equalize_ranges
from vtakit.compiler.quant.exponent_search import Progress, check_target, float_outputs, search_exponents
from vtakit.compiler.quant.exponent_search import keep_float_until as keep_float_until_met
from vtakit.compiler.quant.quantize import (POW2_NODES_NOTE, REQUANT_NOTE, Calibration, graph_roundtrip, keep_nodes_float, one_shift, quantize, weight_exponents, weight_roundtrip)
from vtakit.compiler.quant.techniques.weight_rounding import ROUNDED_KEY, WeightRounding, plan_rounding
from vtakit.compiler.quant.techniques.range_scale import RangeScaling, apply_factors, plan_model_factors, scale_and_correct
from vtakit.compiler.quant.techniques.channel_fill import ChannelFill, apply_channel_fill, plan_channel_fill
from vtakit.compiler.quant import qdq
from vtakit.compiler.quant.qdq import QdqScales
from vtakit.compiler.ops import int8_rule

SYNTHETIC_SAMPLES = 4
SYNTHETIC_BYTES = 1 << 28
"""Made-up calibration samples take at most this much memory (256 MiB): a network whose declared inputs
are larger (within the import's limits) is calibrated on fewer samples, at least one."""


@dataclass(frozen=True)
class WeightsForInt8:
    """What `float_and_int8` makes of the float graph before calibration: it depends on the weight-side
    options and the samples, not on the calibration method, the layers kept float or the wide residual note
    (recipe_search.py reuses it across the recipes it tries)."""
    uncorrected: Graph  # range-scaled and channel-filled, biases as the model has them
    graph: Graph  # the same with the biases corrected for the int8 weights
    scaling: RangeScaling | None  # range_scale's plan (None: not range-scaled)
    fill: ChannelFill
    model_factors_note: dict[str, float]  # a QDQ model's scales met by range scaling: tensor -> factor
    rounded: dict[str, tuple[np.ndarray, np.ndarray]]  # node -> its GPTQ int8 weights (weight_rounding.py)
    rounding: WeightRounding | None  # weight_rounding's summary (None: nearest)


def weights_for_int8(g: Graph, samples: list[dict[str, np.ndarray]], options: QuantOptions) -> WeightsForInt8:
    """Equalization, bias correction, range scaling, channel fill and GPTQ rounding of `g` (float_and_int8;
    `options` as `one_recipe` leaves them)."""
    equalize, bias_correction, requant = options.equalize, options.bias_correction, options.requant
    range_scaled = options.range_scale is RangeScaleMode.ON
    gptq = options.weight_rounding is WeightRoundingMode.GPTQ
    uncorrected = prepare_for_int8(g, samples, equalize=equalize, bias_correction=False)
    multiplied = requant == "multiplier"
    model_scales: QdqScales = g.notes.get("qdq", QdqScales())
    shifts: dict[str, np.ndarray] = {}  # node -> its mean output shift over the real input patches (GPTQ)

    def corrected(graph: Graph) -> Graph:
        """The bias correction for graph's int8 weights (a QDQ model's at its own scales; a GPTQ-rounded
        layer's measured shift)."""
        return prepare_for_int8(graph, samples, equalize="off", bias_correction=bias_correction,
                                roundtrip=qdq.weight_roundtrip(model_scales, graph_roundtrip(graph, requant), multiplied),
                                shifts=shifts)

    g = corrected(uncorrected)
    scaling, model_factors_note, fill = None, {}, ChannelFill()
    if range_scaled and not model_scales:
        uncorrected, g, scaling = scale_and_correct(uncorrected, g, samples, corrected if bias_correction else None,
                                                    one_shift if requant == "pow2" else None)
        fill = plan_channel_fill(g, samples)  # conv inputs the host quantizes, per channel (channel_fill.py)
        if fill.bits:
            uncorrected = apply_channel_fill(uncorrected, fill)
            g = corrected(uncorrected)
    elif range_scaled and equalize == "off" and model_scales.act:
        model_factors = plan_model_factors(uncorrected, {t: model_scales.inexact.get(t, 1.0) for t in model_scales.act})
        if model_factors:  # the model's scales that are not powers of two, met exactly (range_scale.py)
            scaled = apply_factors(uncorrected, model_factors)
            model_scales = qdq.rescaled(model_scales, uncorrected, scaled, model_factors)
            scaled.notes["qdq"] = model_scales
            uncorrected, g = scaled, corrected(scaled)
            model_factors_note = {t: f for t, f in sorted(model_factors.items()) if t in model_scales.act}
    rounded, rounding = {}, None
    if gptq and requant == "pow2" and not model_scales:  # on the final weights, before calibration sees g
        weight_nodes = [n.name for n in uncorrected.nodes if int8_rule(n.op) == "weights"]
        rounded, found, rounding = plan_rounding(uncorrected, samples, weight_nodes, weight_exponents)
        shifts.update(found)
        if rounded and bias_correction:
            g = corrected(uncorrected)
    return WeightsForInt8(uncorrected, g, scaling, fill, model_factors_note, rounded, rounding)


def _noted_as(graph: Graph, source: Graph) -> Graph:
    """A copy of `graph` carrying `source`'s wide residual note (the one note the int8 graph reads that
    `weights_for_int8` does not look at)."""
    out = graph.copy()
    out.notes.pop(WIDE_NOTE, None)
    if WIDE_NOTE in source.notes:
        out.notes[WIDE_NOTE] = source.notes[WIDE_NOTE]
    return out


def one_recipe(options: QuantOptions | None = None, **keywords: Any) -> QuantOptions:
    """`options` with `keywords` set and nothing left "auto": the recipe knobs take the fallback recipe's
    values (recipe.FALLBACK) and requant power-of-two shifts (compile_module resolves it by the configuration,
    fixed_point.check_requant)."""
    opts = fallback(QuantOptions.of(options, **keywords))
    return replace(opts, requant=RequantMode.POW2) if opts.requant is RequantMode.AUTO else opts


def float_and_int8(g: Graph, calibrate, options: QuantOptions | None = None, *, progress: Progress | None = None,
                   weights_cache: dict | None = None, **keywords: Any) -> tuple[Graph, Graph, QuantNotes]:
    """(the float graph quantized from, the int8 graph, what quantization did) for an optimized graph, by one
    recipe: `options` with `keywords` set, as `one_recipe` resolves them.

    weights_cache: `weights_for_int8`'s results by their options, shared by calls on the same graph and
    samples that differ in the rest (recipe_search.py).  Calibration "search" and keep_float_until judge the int8
    graph by its outputs against `g`'s on the calibration samples (exponent_search)."""
    opts = one_recipe(options, **keywords)
    calibration, equalize, requant, keep_float_until = opts.calibration, opts.equalize, opts.requant, opts.keep_float_until
    gptq = opts.weight_rounding is WeightRoundingMode.GPTQ
    if keep_float_until is not None:
        check_target(keep_float_until)
    samples, synthetic = calibration_samples(g, calibrate, opts.seed)
    t1 = time.perf_counter()
    want = float_outputs(g, samples) if calibration == "search" or keep_float_until is not None else []
    multiplied = requant == "multiplier"
    key = (equalize, opts.bias_correction, requant, opts.range_scale, gptq)
    prepared = weights_cache.get(key) if weights_cache is not None else None
    if prepared is None:
        prepared = weights_for_int8(g, samples, opts)
        if weights_cache is not None:
            weights_cache[key] = prepared
    uncorrected, g = _noted_as(prepared.uncorrected, g), _noted_as(prepared.graph, g)
    rounded, rounding, scaling, fill = prepared.rounded, prepared.rounding, prepared.scaling, prepared.fill
    cal: Calibration = run_calibration(g, samples, calibration)
    cal.synthetic = synthetic
    scales: QdqScales = g.notes.get("qdq", QdqScales())
    if scales and equalize != "off":  # equalization rescales activations: the model's scales no longer hold
        scales = QdqScales(notes=[*scales.notes, f"equalize {equalize}: the model's scales are not used"])
    cal.fixed.update(scales.act)  # the model's activation scales replace calibration for their tensors
    range_scale = scaling if scaling is not None else \
        ModelFactors(prepared.model_factors_note) if prepared.model_factors_note else None
    marked, cache = keep_nodes_float(g, opts.keep_float, uncorrected), {}
    cache.update({(ROUNDED_KEY, name): r for name, r in rounded.items()})
    marked.notes[REQUANT_NOTE] = requant.value
    pow2_nodes, float_nodes = qdq.seed_weight_cache(marked, scales, cache,
                                                    [n for n in marked.nodes if int8_rule(n.op) == "weights"], multiplied)
    marked.notes[POW2_NODES_NOTE] = tuple(pow2_nodes)  # a QDQ model's weights keep their own scales
    search = search_exponents(marked, cal, samples, want, progress, cache) if calibration == "search" else None
    auto = None
    if keep_float_until is not None:
        auto = keep_float_until_met(marked, cal, samples, want, keep_float_until, progress=progress,
                                    weight_cache=cache, uncorrected=uncorrected)
        marked = keep_nodes_float(marked, auto.kept, uncorrected)
    q = quantize(marked, cal, cache)
    q.notes.pop("qdq", None)
    qdq_notes = None
    if scales or scales.notes:
        d = qdq.compile_notes(scales, q, pow2_nodes + float_nodes, float_nodes)
        qdq_notes = QdqNotes(d["activations"], tuple(d["weights"]), d["exact"], tuple(d["notes"]))
    notes = QuantNotes(samples=len(samples), synthetic=synthetic, method=calibration, equalize=equalize,
                       bias_correction=opts.bias_correction, requant=requant,
                       weight_rounding=opts.weight_rounding if rounding is not None else WeightRoundingMode.NEAREST,
                       seconds=time.perf_counter() - t1, range_scale=range_scale,
                       channel_fill=fill if scaling is not None and fill.bits else None, gptq=rounding,
                       search=search, keep_float_auto=auto, qdq=qdq_notes)
    return g, q, notes


def prepare_for_int8(g: Graph, samples: list[dict[str, np.ndarray]], *,
                     equalize: EqualizeMode | str = QuantOptions.equalize,
                     bias_correction: bool = QuantOptions.bias_correction, roundtrip=weight_roundtrip,
                     shifts: dict[str, np.ndarray] | None = None) -> Graph:
    """The float graph the int8 one is quantized from: channel ranges equalized, biases corrected
    (`roundtrip`: the weights' int8 value, a QDQ model's at its own scales; `shifts`: measured mean output
    shifts that replace the estimate, correct_bias)."""
    equalize = EqualizeMode.parse(equalize)
    if equalize is not EqualizeMode.OFF:
        g = equalize_ranges(g, clip_as_relu=equalize is EqualizeMode.CLIP_AS_RELU)
    if bias_correction:
        g = correct_bias(g, samples, roundtrip, shifts)
    return g


def _standard_normal(rng: np.random.Generator, shape: tuple[int, ...], chunk: int = 1 << 20) -> np.ndarray:
    """`rng.standard_normal(shape).astype(np.float32)`, the same values, drawn a chunk at a time so that no
    float64 copy of a large input is ever held."""
    out = np.empty(shape, np.float32)
    flat = out.reshape(-1)
    for start in range(0, flat.size, chunk):
        flat[start:start + chunk] = rng.standard_normal(min(chunk, flat.size - start))
    return out


def calibration_samples(graph: Graph, calibrate_with, seed: int = 0) -> tuple[list[dict[str, np.ndarray]], bool]:
    """Samples as a list of feeds; without any, seeded standard-normal inputs (flagged synthetic)."""
    if calibrate_with is None:
        rng = np.random.default_rng(seed)
        per_sample = sum(4 * int(np.prod(graph.tensors[n].shape, dtype=np.int64)) for n in graph.inputs)
        count = max(1, min(SYNTHETIC_SAMPLES, SYNTHETIC_BYTES // max(per_sample, 1)))
        samples = [{n: _standard_normal(rng, graph.tensors[n].shape) for n in graph.inputs} for _ in range(count)]
        return samples, True
    samples = []
    for i, s in enumerate(calibrate_with):
        if isinstance(s, dict):
            samples.append(s)
        elif len(graph.inputs) == 1:
            samples.append({graph.inputs[0]: np.asarray(s)})
        else:
            raise CompileError(f"calibration sample {i} must be a dict by input name ({graph.inputs})")
    if not samples:
        raise CompileError("calibrate was given no samples")
    return samples, False


def first_sample_shapes(calibrate) -> dict[str, tuple[int, ...]] | None:
    """Shapes of the first calibration sample by input name (an unnamed array binds the first input)."""
    if calibrate is None or len(calibrate) == 0:
        return None
    first = calibrate[0]
    if isinstance(first, dict):
        return {k: tuple(np.shape(v)) for k, v in first.items()}
    return {"": tuple(np.shape(first))}
