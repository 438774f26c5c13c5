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
from vtakit.compiler.options import EqualizeMode, QuantOptions, RequantMode, WeightRoundingMode
from vtakit.compiler.quant.recipe import fallback
from vtakit.compiler.ir import Graph
from vtakit.compiler.module.notes import ModelFactors, QdqNotes, QuantNotes
from vtakit.compiler.quant.techniques.range_scale import RangeScaling
from vtakit.compiler.quant.calibration import calibrate as run_calibration
from vtakit.compiler.quant.techniques.equalize import correct_bias, equalize as equalize_ranges
from vtakit.compiler.quant.techniques import catalog  # noqa: F401  (every technique registers itself)
from vtakit.compiler.quant.techniques.registry import WeightState, float_stage, mark_notes, weights_key, weights_stage
from vtakit.compiler.quant.exponent_search import Progress, check_target, float_outputs, search_exponents
from vtakit.compiler.quant.exponent_search import keep_float_until as keep_float_until_met
from vtakit.compiler.quant.precision import keep_nodes_float, keep_out_of_reach
from vtakit.compiler.quant.quantize import (POW2_NODES_NOTE, REQUANT_NOTE, Calibration, graph_roundtrip, quantize,
                                           unrepresentable, weight_exponents, weight_roundtrip)
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
    options (`registry.weights_key`) and the samples, not on the calibration method, the layers kept float or
    the MARK techniques' notes (recipe_search.py reuses it across the recipes it tries)."""
    uncorrected: Graph  # after the FLOAT and WEIGHTS techniques, biases as the model has them
    graph: Graph  # the same with the biases corrected for the int8 weights
    records: dict[str, Any]  # technique -> what it did (registry.WeightState.record)
    seeds: dict[tuple[str, str], Any]  # entries of the rewrite's weight cache (GPTQ's rounded weights)


def weights_for_int8(g: Graph, samples: list[dict[str, np.ndarray]], options: QuantOptions) -> WeightsForInt8:
    """The registered techniques' FLOAT stage (equalization), the bias correction, then their WEIGHTS stage
    in order (range scaling, channel fill, GPTQ rounding; techniques/registry.py) on `g` (float_and_int8;
    `options` as `one_recipe` leaves them)."""
    model_scales: QdqScales = g.notes.get("qdq", QdqScales())
    uncorrected = float_stage(g, samples, options)
    state = WeightState(samples, options, uncorrected, uncorrected, _correct_bias, weight_exponents, model_scales)
    state = weights_stage(state.with_weights(uncorrected))
    return WeightsForInt8(state.uncorrected, state.graph, dict(state.records), dict(state.seeds))


def _correct_bias(state: WeightState, graph: Graph) -> Graph:
    """The bias correction for graph's int8 weights (a QDQ model's at its own scales; a GPTQ-rounded layer's
    measured shift): the WeightState's `correct`."""
    requant = state.options.requant
    roundtrip = qdq.weight_roundtrip(state.qdq, graph_roundtrip(graph, requant), requant == "multiplier")
    return prepare_for_int8(graph, state.samples, equalize="off", bias_correction=state.options.bias_correction,
                            roundtrip=roundtrip, shifts=dict(state.shifts))


def _noted_as(graph: Graph, source: Graph) -> Graph:
    """A copy of `graph` carrying `source`'s MARK notes (the notes the int8 graph reads that
    `weights_for_int8` does not look at: the wide residual note)."""
    out = graph.copy()
    for note in mark_notes():
        out.notes.pop(note, None)
        if note in source.notes:
            out.notes[note] = source.notes[note]
    return out


def _range_scale_note(record: Any) -> RangeScaling | ModelFactors | None:
    """range_scale's record as the notes hold it: a RangeScaling, or a QDQ model's factors."""
    return ModelFactors(record) if isinstance(record, dict) else record


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
    if keep_float_until is not None:
        check_target(keep_float_until)
    samples, synthetic = calibration_samples(g, calibrate, opts.seed)
    t1 = time.perf_counter()
    want = float_outputs(g, samples) if calibration == "search" or keep_float_until is not None else []
    multiplied = requant == "multiplier"
    key = weights_key(opts)
    prepared = weights_cache.get(key) if weights_cache is not None else None
    if prepared is None:
        prepared = weights_for_int8(g, samples, opts)
        if weights_cache is not None:
            weights_cache[key] = prepared
    uncorrected, g = _noted_as(prepared.uncorrected, g), _noted_as(prepared.graph, g)
    records = prepared.records
    cal: Calibration = run_calibration(g, samples, calibration)
    cal.synthetic = synthetic
    scales: QdqScales = g.notes.get("qdq", QdqScales())
    if scales and equalize != "off":  # equalization rescales activations: the model's scales no longer hold
        scales = QdqScales(notes=[*scales.notes, f"equalize {equalize}: the model's scales are not used"])
    cal.fixed.update(scales.act)  # the model's activation scales replace calibration for their tensors
    marked, cache = keep_nodes_float(g, opts.keep_float, uncorrected), {}
    marked = keep_out_of_reach(marked, unrepresentable(cal.amax) - set(cal.fixed))
    cache.update(prepared.seeds)
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
                       weight_rounding=opts.weight_rounding if "weight_rounding" in records else WeightRoundingMode.NEAREST,
                       seconds=time.perf_counter() - t1, range_scale=_range_scale_note(records.get("range_scale")),
                       channel_fill=records.get("channel_fill"), gptq=records.get("weight_rounding"),
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
