"""The network compiler's driver: ONNX in, a CompiledModule out.

    import -> simplify -> Gemm/MatMul to Dense -> fold batch norm and scales -> fuse activations
      target "cpu": the float graph, every node a host task
      target "cuda": the same float graph, every node a GPU kernel (the launches and their PTX recorded)
      target "vta": calibrate -> quantize (power-of-two int8) -> partition -> fuse residual adds and
                    max pools into their convs (fusion.py) -> one accelerator task
                    per accelerator node -> static DRAM plan; host="cuda" puts the host tasks on the GPU
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.passes.fusion import fuse_max_pools, fuse_residual_adds
from vtakit.compiler.quant.recipe import AUTO, check_knob, float_and_int8_auto
from vtakit.compiler.quant.techniques.wide_residual import WIDE_NOTE
from vtakit.compiler.gc_budget import with_fewer_collections
from vtakit.compiler.passes.fold import canonicalize_dense, fold_into_conv, fold_pads, fuse_activations
from vtakit.compiler.ir import Graph
from vtakit.compiler.passes.lower import VtaTask, lower_node
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.passes.partition import PartitionOptions, partition
from vtakit.compiler.module.dram_plan import plan_dram
from vtakit.compiler.quant.calibration import DEFAULT_METHOD, calibrate as run_calibration, check_method
from vtakit.compiler.quant.techniques.equalize import check_mode, correct_bias, equalize as equalize_ranges
from vtakit.compiler.quant.exponent_search import Progress, check_target, float_outputs, search_exponents
from vtakit.compiler.quant.exponent_search import keep_float_until as keep_float_until_met
from vtakit.compiler.quant.quantize import POW2_NODES_NOTE, REQUANT_NOTE, Calibration, graph_roundtrip, keep_nodes_float, one_shift, quantize, strip_fake_quant, weight_exponents, weight_roundtrip
from vtakit.compiler.quant.techniques.weight_rounding import ROUNDED_KEY, plan_rounding
from vtakit.compiler.quant.techniques.weight_rounding import check_mode as check_weight_rounding
from vtakit.compiler.quant.techniques.fixed_point import check_requant
from vtakit.compiler.quant.techniques.range_scale import apply_factors, plan_model_factors, scale_and_correct
from vtakit.compiler.quant.techniques.channel_fill import ChannelFill, apply_channel_fill, plan_channel_fill
from vtakit.compiler.quant.techniques.range_scale import check_mode as check_range_scale
from vtakit.compiler.passes.simplify import simplify
from vtakit.compiler.quant import qdq
from vtakit.compiler.quant.qdq import QdqScales, read_scales
from vtakit.compiler.ops import int8_rule
from vtakit.isa.config import DEFAULT_PRESET, HwConfig
from vtakit.isa.fields import INSN_BYTES

TARGETS = ("vta", "cpu", "cuda")
HOSTS = ("cpu", "cuda")
SYNTHETIC_SAMPLES = 4
SYNTHETIC_BYTES = 1 << 28
"""Made-up calibration samples take at most this much memory (256 MiB): a network whose declared inputs
are larger (within the import's limits) is calibrated on fewer samples, at least one."""
EQUALIZE = "off"  # cross-layer equalization before quantization: equalize.MODES (measured in the README)
BIAS_CORRECTION = True  # wins on EfficientNet-Lite0: see the README's accuracy figures
REQUANT = "auto"  # fixed-point multipliers where the config has ALU MUL (fixed_point.py; README, issue 16)
RANGE_SCALE = "on"  # activation groups rescaled to fill the int8 range (range_scale.py; README, issue 16)
WEIGHT_ROUNDING = "nearest"  # float_and_int8's rounding; compile_module's is "auto" (recipe.py)


def optimize(graph: Graph, *, keep_fake_quant: bool = False) -> Graph:
    """The float graph passes shared by both targets.  Stripping a QDQ model's fake quantization keeps
    its scales in notes["qdq"] (`qdq.read_scales`), for `float_and_int8`."""
    graph = graph.copy()
    scales = read_scales(graph)
    graph.notes.pop(qdq.NOTE_KEY, None)
    g = simplify(graph)
    if not keep_fake_quant:
        g = strip_fake_quant(g)
        if scales or scales.notes:
            g.notes["qdq"] = scales
    g = fuse_activations(fold_into_conv(canonicalize_dense(fold_pads(g))))
    return simplify(g)


@dataclass(frozen=True)
class WeightsForInt8:
    """What `float_and_int8` makes of the float graph before calibration: it depends on the weight-side
    options and the samples, not on the calibration method, the layers kept float or the wide residual note
    (recipe.py reuses it across the recipes it tries)."""
    uncorrected: Graph  # range-scaled and channel-filled, biases as the model has them
    graph: Graph  # the same with the biases corrected for the int8 weights
    scaling: Any  # range_scale's plan (None: not range-scaled)
    fill: ChannelFill
    model_factors_note: dict[str, float]  # a QDQ model's scales met by range scaling: tensor -> factor
    rounded: dict[str, tuple[np.ndarray, np.ndarray]]  # node -> its GPTQ int8 weights (weight_rounding.py)
    rounding: Any  # weight_rounding's summary (None: nearest)


def weights_for_int8(g: Graph, samples: list[dict[str, np.ndarray]], *, equalize: str, bias_correction: bool,
                     requant: str, range_scale: str, gptq: bool) -> WeightsForInt8:
    """Equalization, bias correction, range scaling, channel fill and GPTQ rounding of `g` (float_and_int8)."""
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
    if check_range_scale(range_scale) and not model_scales:
        uncorrected, g, scaling = scale_and_correct(uncorrected, g, samples, corrected if bias_correction else None,
                                                    one_shift if requant == "pow2" else None)
        fill = plan_channel_fill(g, samples)  # conv inputs the host quantizes, per channel (channel_fill.py)
        if fill.bits:
            uncorrected = apply_channel_fill(uncorrected, fill)
            g = corrected(uncorrected)
    elif check_range_scale(range_scale) and equalize == "off" and model_scales.act:
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


def float_and_int8(g: Graph, calibrate, *, seed: int = 0, calibration: str = DEFAULT_METHOD,
                   equalize: str = EQUALIZE, bias_correction: bool = BIAS_CORRECTION,
                   keep_float=(), keep_float_until: float | None = None,
                   progress: Progress | None = None, requant: str = "pow2",
                   range_scale: str = RANGE_SCALE, weight_rounding: str = WEIGHT_ROUNDING,
                   weights_cache: dict | None = None) -> tuple[Graph, Graph, dict[str, Any]]:
    """(the float graph quantized from, the int8 graph, calibration notes) for an optimized graph.

    requant: "pow2" or "multiplier" (as `fixed_point.check_requant` resolves it for the config);
    range_scale: range_scale.MODES (activation groups rescaled to fill the int8 range, range_scale.py);
    weight_rounding: weight_rounding.MODES ("gptq": int8 weights rounded for each layer's output);
    weights_cache: `weights_for_int8`'s results by their options, shared by calls on the same graph and
    samples that differ in the rest (recipe.py).

    calibration "search" and keep_float_until judge the int8 graph by its outputs against `g`'s on
    the calibration samples (exponent_search)."""
    check_method(calibration)
    check_range_scale(range_scale)
    gptq = check_weight_rounding(weight_rounding)
    if keep_float_until is not None:
        check_target(keep_float_until)
    samples, synthetic = calibration_samples(g, calibrate, seed)
    t1 = time.perf_counter()
    want = float_outputs(g, samples) if calibration == "search" or keep_float_until is not None else []
    multiplied = requant == "multiplier"
    key = (equalize, bias_correction, requant, range_scale, gptq)
    prepared = weights_cache.get(key) if weights_cache is not None else None
    if prepared is None:
        prepared = weights_for_int8(g, samples, equalize=equalize, bias_correction=bias_correction,
                                    requant=requant, range_scale=range_scale, gptq=gptq)
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
    notes: dict[str, Any] = dict(samples=len(samples), synthetic=synthetic, method=calibration, equalize=equalize,
                                 bias_correction=bias_correction, requant=requant,
                                 weight_rounding=weight_rounding if rounding is not None else "nearest")
    if scaling is not None:
        notes["range_scale"] = asdict(scaling)
        if fill.bits:
            notes["channel_fill"] = asdict(fill)
    elif prepared.model_factors_note:
        notes["range_scale"] = dict(model_factors=prepared.model_factors_note)  # tensor -> factor (the model's scale met)
    marked, cache = keep_nodes_float(g, keep_float, uncorrected), {}
    cache.update({(ROUNDED_KEY, name): r for name, r in rounded.items()})
    if rounding is not None:
        notes["gptq"] = asdict(rounding)
    marked.notes[REQUANT_NOTE] = requant
    pow2_nodes, float_nodes = qdq.seed_weight_cache(marked, scales, cache,
                                                    [n for n in marked.nodes if int8_rule(n.op) == "weights"], multiplied)
    marked.notes[POW2_NODES_NOTE] = tuple(pow2_nodes)  # a QDQ model's weights keep their own scales
    if calibration == "search":
        notes["search"] = asdict(search_exponents(marked, cal, samples, want, progress, cache))
    if keep_float_until is not None:
        auto = keep_float_until_met(marked, cal, samples, want, keep_float_until, progress=progress,
                                    weight_cache=cache, uncorrected=uncorrected)
        notes["keep_float_auto"] = asdict(auto)
        marked = keep_nodes_float(marked, auto.kept, uncorrected)
    q = quantize(marked, cal, cache)
    q.notes.pop("qdq", None)
    if scales or scales.notes:
        notes["qdq"] = qdq.compile_notes(scales, q, pow2_nodes + float_nodes, float_nodes)
    notes["seconds"] = time.perf_counter() - t1
    return g, q, notes


def prepare_for_int8(g: Graph, samples: list[dict[str, np.ndarray]], *, equalize: str = EQUALIZE,
                     bias_correction: bool = BIAS_CORRECTION, roundtrip=weight_roundtrip,
                     shifts: dict[str, np.ndarray] | None = None) -> Graph:
    """The float graph the int8 one is quantized from: channel ranges equalized, biases corrected
    (`roundtrip`: the weights' int8 value, a QDQ model's at its own scales; `shifts`: measured mean output
    shifts that replace the estimate, correct_bias)."""
    if check_mode(equalize) != "off":
        g = equalize_ranges(g, clip_as_relu=equalize == "clip-as-relu")
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


def _liveness(cfg: HwConfig, tasks: list, graph: Graph) -> dict[str, tuple[int, int, int]]:
    """Activation buffer key -> (bytes, first task, last task) from the task order."""
    spans: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    produced: dict[str, str] = {}  # tensor -> key of the buffer its accelerator producer writes
    readers = graph.consumers()
    index = {t.node if isinstance(t, VtaTask) else t: i for i, t in enumerate(tasks)}

    def touch(key: str, i: int) -> None:
        span = spans.setdefault(key, [i, i])
        span[0], span[1] = min(span[0], i), max(span[1], i)

    for i, t in enumerate(tasks):
        if not isinstance(t, VtaTask):
            continue
        for name, buf in t.acts.items():
            sizes[buf.key] = max(sizes.get(buf.key, 0), t.program.tensors[name].nbytes(cfg))
            touch(buf.key, i)
        produced[t.output.tensor] = t.output.key
    for tensor, key in produced.items():  # the host (or a relayout) reads accelerator results from DRAM
        for reader in readers.get(tensor, []):
            touch(key, index[reader.name])
        if tensor in graph.outputs:
            touch(key, len(tasks))
    return {k: (sizes[k], s[0], s[1]) for k, s in spans.items()}


@with_fewer_collections  # issue 37: the collector took a third of a huge graph's compile (gc_budget.py)
def compile_module(model, config=DEFAULT_PRESET, *, target: str = "vta", calibrate=None,
                   input_shapes: dict[str, tuple[int, ...]] | None = None,
                   partition_options: PartitionOptions | dict | None = None,
                   schedules: dict[str, Any] | None = None, seed: int = 0, host: str = "cpu",
                   calibration: str = AUTO, equalize: str = EQUALIZE, bias_correction: bool = BIAS_CORRECTION,
                   keep_float: tuple[str, ...] = (), keep_float_until: float | None = None,
                   progress: Progress | None = None, requant: str = REQUANT,
                   range_scale: str = RANGE_SCALE, wide_residual: str = AUTO,
                   weight_rounding: str = AUTO) -> CompiledModule:
    """Compile an ONNX model (path, bytes or ModelProto) for `config`; see the module docstring.

    calibration: how activation exponents are chosen (compiler.quant.calibration.METHODS, or "auto");
    equalize / bias_correction: the passes of compiler.quant.techniques.equalize before quantization;
    keep_float: nodes that stay float on the host; keep_float_until: a mean output cosine on the
    calibration samples, reached by keeping the worst layers float too (exponent_search);
    progress(phase, done, total): called during the searches; requant: how conv/dense requantize
    (fixed_point.REQUANT_MODES: "auto" is "multiplier" where the config has ALU MUL, else "pow2");
    range_scale: range_scale.MODES, "on": activation groups rescaled to fill the int8 range;
    wide_residual: wide_residual.MODES, "on": a conv feeding a residual add keeps extra bits;
    weight_rounding: weight_rounding.MODES, "gptq": int8 weights rounded for each layer's output;
    the three are "auto" by default: chosen by the network's outputs on the calibration samples (recipe.py)."""
    if target not in TARGETS:
        raise CompileError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
    if host not in HOSTS:
        raise CompileError(f"unknown host {host!r}; use one of {', '.join(HOSTS)}")
    if target == "cpu" and host == "cuda":
        raise CompileError("target cpu runs every node on the CPU; use target cuda for the GPU")
    cfg = HwConfig.load(config)
    for knob, value in (("calibration", calibration), ("wide_residual", wide_residual),
                        ("weight_rounding", weight_rounding)):
        check_knob(knob, value)
    check_mode(equalize)
    requant = check_requant(requant, cfg.alu_mul, cfg.label)
    check_range_scale(range_scale)
    if keep_float_until is not None:
        check_target(keep_float_until)
    t0 = time.perf_counter()
    if calibrate is not None and not isinstance(calibrate, (list, tuple, np.ndarray)):
        calibrate = list(calibrate)  # an iterator is read twice: its first sample binds symbolic dims
    graph = import_onnx(model, input_shapes, bind=first_sample_shapes(calibrate))
    notes: dict[str, Any] = dict(source_nodes=len(graph.nodes), defaulted_dims=graph.notes.get("defaulted_dims", []))
    g = optimize(graph, keep_fake_quant=target != "vta")
    notes["optimized_nodes"] = len(g.nodes)
    if target in ("cpu", "cuda"):
        if target == "cuda":
            notes["gpu"] = _record_gpu_kernels(g, None)
        notes["compile_s"] = time.perf_counter() - t0
        return CompiledModule(cfg, target, g, [n.name for n in g.nodes], notes=notes,
                              host="cuda" if target == "cuda" else "cpu")
    _, q, notes["calibration"] = float_and_int8_auto(g, cfg, calibrate, seed=seed, calibration=calibration,
                                                     wide_residual=wide_residual, weight_rounding=weight_rounding,
                                                     equalize=equalize, bias_correction=bias_correction,
                                                     keep_float=keep_float, keep_float_until=keep_float_until,
                                                     progress=progress, requant=requant, range_scale=range_scale)
    if isinstance(partition_options, dict):
        partition_options = PartitionOptions(**partition_options)
    place = partition(q, cfg, partition_options)
    if (partition_options or PartitionOptions()).fuse_residual:
        place = fuse_residual_adds(q, place)
    if (partition_options or PartitionOptions()).fuse_pool:
        place = fuse_max_pools(q, place, cfg)
    consts: dict[str, np.ndarray] = {}
    tasks: list = []
    for n in q.nodes:
        if place[n.name] == "vta":
            tasks.append(lower_node(q, n, cfg, consts, (schedules or {}).get(n.name)))
        else:
            tasks.append(n.name)
    fixed = {k: v.size for k, v in consts.items()}
    fixed.update({f"code:{t.node}": t.program.instructions * INSN_BYTES for t in tasks if isinstance(t, VtaTask)})
    plan = plan_dram(cfg, fixed, _liveness(cfg, tasks, q))
    notes["host_reasons"] = q.notes.get("host_reasons", {})
    if host == "cuda":
        notes["gpu"] = _record_gpu_kernels(q, [t for t in tasks if isinstance(t, str)])
    notes["compile_s"] = time.perf_counter() - t0
    return CompiledModule(cfg, "vta", q, tasks, consts, plan, notes, host=host)


def first_sample_shapes(calibrate) -> dict[str, tuple[int, ...]] | None:
    """Shapes of the first calibration sample by input name (an unnamed array binds the first input)."""
    if calibrate is None or len(calibrate) == 0:
        return None
    first = calibrate[0]
    if isinstance(first, dict):
        return {k: tuple(np.shape(v)) for k, v in first.items()}
    return {"": tuple(np.shape(first))}


def _record_gpu_kernels(graph: Graph, nodes: list[str] | None) -> dict[str, Any]:
    """The GPU launches of `nodes` (all when None), their PTX generated now for sm_80, the PTX the
    runtime loads on any Ampere or newer GPU (see cuda.graph_kernels and cuda.driver_api.arch_for)."""
    from vtakit.compiler.backends.cuda import record_launches

    t0 = time.perf_counter()
    record = record_launches(graph, nodes)
    record["seconds"] = time.perf_counter() - t0
    return record

