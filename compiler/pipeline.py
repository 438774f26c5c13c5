"""The network compiler's driver: ONNX in, a CompiledModule out, by the named steps of `PIPELINE`.

    import -> optimize (the float passes)
      target "cpu": the float graph, every node a host task
      target "cuda": the same float graph, every node a GPU kernel (the launches and their PTX recorded)
      target "vta": quantize (power-of-two int8, recipe searched) -> partition -> fuse residual adds and
                    max pools into their convs -> lower (one accelerator task per accelerator node) ->
                    plan (static DRAM); host="cuda" puts the host tasks on the GPU

Each step is a function of a `Compilation` (what earlier steps made); `PIPELINE` lists them with the
targets they run for, so the order the code runs is the list you read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from vtakit.compiler import cache as compile_cache
from vtakit.compiler.backends.cuda import record_launches
from vtakit.compiler.passes.fusion import fuse_max_pools, fuse_residual_adds
from vtakit.compiler.options import CompileOptions, Host, Target
from vtakit.compiler.quant.int8 import first_sample_shapes
from vtakit.compiler.quant.recipe_search import float_and_int8_auto
from vtakit.compiler.gc_budget import with_fewer_collections
from vtakit.compiler.passes.fold import canonicalize_dense, fold_into_conv, fold_pads, fuse_activations
from vtakit.compiler.passes.linear_rows import flatten_matmul_rows
from vtakit.compiler.passes.head_products import split_head_products
from vtakit.compiler.ir import Graph
from vtakit.compiler.passes.lower import VtaTask, lower_node
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.module.notes import CompileNotes, QuantNotes
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.passes.partition import PartitionOptions, host_bound, partition
from vtakit.compiler.passes.segments import count_segments, group_segments
from vtakit.compiler.module.dram_plan import DramPlan, liveness, plan_dram
from vtakit.compiler.quant.exponent_search import Progress, check_target
from vtakit.compiler.quant.quantize import strip_fake_quant
from vtakit.compiler.quant.precision import keep_vector_islands_float
from vtakit.compiler.quant.techniques.fixed_point import check_requant
from vtakit.compiler.passes.simplify import simplify
from vtakit.compiler.quant.qdq import read_scales
from vtakit.compiler.ops.quant import QDQ_WEIGHTS_NOTE
from vtakit.errors import VtaError, one_line
from vtakit.isa.config import DEFAULT_PRESET, HwConfig
from vtakit.isa.fields import INSN_BYTES

def optimize(graph: Graph, *, keep_fake_quant: bool = False) -> Graph:
    """The float graph passes shared by both targets.  Stripping a QDQ model's fake quantization keeps
    its scales in notes["qdq"] (`qdq.read_scales`), for `float_and_int8`."""
    graph = graph.copy()
    scales = read_scales(graph)
    graph.notes.pop(QDQ_WEIGHTS_NOTE, None)
    g = simplify(graph)
    if not keep_fake_quant:
        g = strip_fake_quant(g)
        if scales or scales.notes:
            g.notes["qdq"] = scales
    g = fuse_activations(fold_into_conv(canonicalize_dense(flatten_matmul_rows(fold_pads(g)))))
    return simplify(g)


@dataclass
class Compilation:
    """What the steps hand on: each step reads the fields earlier steps set and sets its own."""

    model: Any
    config: HwConfig
    options: CompileOptions
    calibrate: list | None
    progress: Progress | None
    started: float
    source: Graph | None = None  # the imported graph
    float_graph: Graph | None = None  # after the float passes
    graph: Graph | None = None  # what the module runs: the float graph (cpu, cuda) or the int8 graph (vta)
    quant_notes: QuantNotes | None = None
    place: dict[str, str] = field(default_factory=dict)  # node -> "vta" or the host
    tasks: list = field(default_factory=list)  # VtaTask or a host node's name, in run order
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    plan: DramPlan | None = None
    gpu: dict[str, Any] | None = None
    step_s: dict[str, float] = field(default_factory=dict)  # seconds per step run

    def module(self) -> CompiledModule:
        target = self.options.target
        notes = CompileNotes(len(self.source.nodes), len(self.float_graph.nodes), time.perf_counter() - self.started,
                             tuple(self.source.notes.get("defaulted_dims", [])), self.quant_notes,
                             dict(self.graph.notes.get("host_reasons", {})) if target is Target.VTA else {}, self.gpu,
                             dict(self.step_s))
        if target is not Target.VTA:
            return CompiledModule(self.config, target.value, self.graph, self.tasks, notes=notes,
                                  host="cuda" if target is Target.CUDA else "cpu")
        return CompiledModule(self.config, "vta", self.graph, self.tasks, self.consts, self.plan, notes,
                              host=self.options.host.value)


def _import(c: Compilation) -> None:
    c.source = import_onnx(c.model, c.options.input_shapes, bind=first_sample_shapes(c.calibrate),
                           values=c.options.bind)


def _optimize(c: Compilation) -> None:
    c.float_graph = c.graph = optimize(c.source, keep_fake_quant=c.options.target is not Target.VTA)
    if c.options.target is not Target.VTA:
        c.tasks = [n.name for n in c.graph.nodes]


def _heads(c: Compilation) -> None:
    c.float_graph = c.graph = split_head_products(c.float_graph)


def _precision(c: Compilation) -> None:
    """Precision follows placement: an int8-capable node the accelerator would not take stays float on the
    host (`partition.host_bound`), and so do squeeze-excite convs between float host nodes
    (`precision.keep_vector_islands_float`), unless the model says int8 (QDQ) or the options ask for int8 there."""
    if c.float_graph.notes.get("qdq") or c.options.quant.host_int8:
        return
    bound = host_bound(c.float_graph, c.config, _partition_options(c))
    if bound:
        g = c.float_graph.copy()
        for n in g.nodes:
            if n.name in bound:
                n.attrs["keep_float"] = f"the host runs it ({bound[n.name]})"
        c.float_graph = g
    c.float_graph = keep_vector_islands_float(c.float_graph)


def _quantize(c: Compilation) -> None:
    _, c.graph, c.quant_notes = float_and_int8_auto(c.float_graph, c.config, c.calibrate, c.options.quant,
                                                    progress=c.progress)


def _partition_options(c: Compilation) -> PartitionOptions | None:
    options = c.options.partition
    return PartitionOptions(**options) if isinstance(options, Mapping) else options


def _partition(c: Compilation) -> None:
    c.place = partition(c.graph, c.config, _partition_options(c))


def _fuse(c: Compilation) -> None:
    options = _partition_options(c) or PartitionOptions()
    if options.fuse_residual:
        c.place = fuse_residual_adds(c.graph, c.place)
    if options.fuse_pool:
        c.place = fuse_max_pools(c.graph, c.place, c.config)


def _order(c: Compilation) -> None:
    before = count_segments(c.graph, c.place)
    group_segments(c.graph, c.place)
    c.graph.notes["host_segments"] = (before, count_segments(c.graph, c.place))


LOWERING_FAILED = "the accelerator's lowering failed"
"""How a host reason starts for a node the partition put on the accelerator whose lowering then failed."""


def _lower(c: Compilation) -> None:
    """One task per node; a node whose lowering fails (a field too narrow for its padding, a shape no tiling
    fits) runs on the host instead, with the failure as its reason: an accelerator limit never aborts a compile."""
    schedules = c.options.schedules or {}
    reasons = c.graph.notes.setdefault("host_reasons", {})
    c.tasks = []
    for n in c.graph.nodes:
        if c.place[n.name] == "vta":
            consts: dict[str, np.ndarray] = {}
            try:
                c.tasks.append(lower_node(c.graph, n, c.config, consts, schedules.get(n.name)))
                c.consts.update(consts)
                continue
            except MemoryError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure of one node's lowering: that node to the host
                c.place[n.name] = "host"
                what = str(e) if isinstance(e, VtaError) else f"{type(e).__name__}: {e}"
                reasons[n.name] = f"{LOWERING_FAILED}: {one_line(what)}"
        c.tasks.append(n.name)


def _plan(c: Compilation) -> None:
    fixed = {k: v.size for k, v in c.consts.items()}
    fixed.update({f"code:{t.node}": t.program.instructions * INSN_BYTES for t in c.tasks if isinstance(t, VtaTask)})
    c.plan = plan_dram(c.config, fixed, liveness(c.config, c.tasks, c.graph))


def _gpu_kernels(c: Compilation) -> None:
    if c.options.target is Target.CUDA:
        c.gpu = _record_gpu_kernels(c.graph, None)
    elif c.options.target is Target.VTA and c.options.host is Host.CUDA:
        c.gpu = _record_gpu_kernels(c.graph, [t for t in c.tasks if isinstance(t, str)])


@dataclass(frozen=True)
class Step:
    """One named step of the compiler, and the targets it runs for."""

    name: str
    run: Callable[[Compilation], None]
    targets: tuple[Target, ...]
    doc: str


ALL_TARGETS = tuple(Target)
VTA_ONLY = (Target.VTA,)
PIPELINE: tuple[Step, ...] = (
    Step("import", _import, ALL_TARGETS, "ONNX model -> graph IR (frontend/)"),
    Step("optimize", _optimize, ALL_TARGETS, "simplify, Gemm/MatMul to Dense, fold batch norm, scales and pads, "
                                             "fuse activations (passes/); cpu and cuda stop here, one host task "
                                             "per node"),
    Step("heads", _heads, VTA_ONLY, "batched products of two activations (attention's Q.K^T, A.V) split into one "
                                     "accelerator product per head (passes/head_products.py)"),
    Step("precision", _precision, VTA_ONLY, "int8-capable nodes the accelerator would not take stay float on "
                                            "the host (passes/partition.py host_bound)"),
    Step("quantize", _quantize, VTA_ONLY, "calibrate and quantize to power-of-two int8, the recipe searched "
                                          "(quant/)"),
    Step("partition", _partition, VTA_ONLY, "accelerator or host per node (passes/partition.py)"),
    Step("fuse", _fuse, VTA_ONLY, "residual adds and max pools into the convs that feed them (passes/fusion.py)"),
    Step("order", _order, VTA_ONLY, "host nodes grouped into as few segments as the dependencies allow "
                                    "(passes/segments.py)"),
    Step("lower", _lower, VTA_ONLY, "one accelerator task per accelerator node (passes/lower.py, backends/vta/)"),
    Step("plan", _plan, VTA_ONLY, "the static DRAM plan (module/dram_plan.py)"),
    Step("gpu kernels", _gpu_kernels, ALL_TARGETS, "the GPU launches and their PTX, where the GPU runs nodes"),
)
"""The compiler's steps in the order `compile_module` runs them."""


@with_fewer_collections  # the collector took a third of a huge graph's compile (gc_budget.py)
def compile_module(model, config=DEFAULT_PRESET, options: CompileOptions | None = None, *, calibrate=None,
                   progress: Progress | None = None, cache: bool | None = None, **keywords: Any) -> CompiledModule:
    """Compile an ONNX model (path, bytes or ModelProto) for `config` by running `PIPELINE`.

    options: a CompileOptions (compiler/options.py: each option, its type and its values); `keywords` set
    any of its fields or its QuantOptions' by name (`calibration="mse"`, `target="cpu"`,
    `partition_options=...`).  calibrate: the calibration samples (None: seeded made-up ones);
    progress(phase, done, total): called before each step ("compile: <step>") and during the searches; the
    module's notes keep the seconds each step took (`notes.step_s`).  The recipe knobs (calibration, wide_residual,
    weight_rounding) are "auto" by default: chosen by the network's outputs on the calibration samples
    (quant/recipe_search.py); requant "auto" is "multiplier" where the config has ALU MUL, else "pow2".
    cache: False compiles afresh; None (on unless VTAKIT_COMPILE_CACHE=off) or True first looks for the module an
    identical compile stored on disk, and stores this one (compiler/cache.py says what the key covers)."""
    use_cache = compile_cache.enabled(cache)
    opts = CompileOptions.of(options, **keywords)
    cfg = HwConfig.load(config)
    quant = replace(opts.quant, requant=check_requant(opts.quant.requant, cfg.alu_mul, cfg.label))
    if quant.keep_float_until is not None:
        check_target(quant.keep_float_until)
    started = time.perf_counter()
    if calibrate is not None and not isinstance(calibrate, (list, tuple, np.ndarray)):
        calibrate = list(calibrate)  # an iterator is read twice: its first sample binds symbolic dims
    compilation = Compilation(model, cfg, replace(opts, quant=quant), calibrate, progress, started)
    digest = compile_cache.key(model, cfg, compilation.options, calibrate) if use_cache else None
    if digest is not None and (stored := compile_cache.load(digest)) is not None:
        return stored
    steps = [step for step in PIPELINE if opts.target in step.targets]
    for done, step in enumerate(steps):
        if progress is not None:
            progress(f"compile: {step.name}", done, len(steps))
        t0 = time.perf_counter()
        step.run(compilation)
        compilation.step_s[step.name] = time.perf_counter() - t0
    if progress is not None:
        progress("compile: done", len(steps), len(steps))
    module = compilation.module()
    if digest is not None:
        compile_cache.store(digest, module)
    return module


def _record_gpu_kernels(graph: Graph, nodes: list[str] | None) -> dict[str, Any]:
    """The GPU launches of `nodes` (all when None), their PTX generated now for sm_80, the PTX the
    runtime loads on any Ampere or newer GPU (see cuda.graph_kernels and cuda.driver_api.arch_for)."""
    t0 = time.perf_counter()
    record = record_launches(graph, nodes)
    record["seconds"] = time.perf_counter() - t0
    return record

