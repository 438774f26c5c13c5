"""The network commands of the `vtakit` command line: `compile`, `run`, `report` and the demo."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from vtakit.cli._common import CONFIG_HELP, DeprecatedAlias, console, png_path, progress_console, require_full_install
from vtakit.compiler.frontend.limits import use_limits
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.module.macs import module_macs
from vtakit.compiler.module.notes import QuantNotes
from vtakit.compiler.module.report import calibration_lines, host_reason_lines
from vtakit.compiler.module.runner import NonFiniteInputWarning
from vtakit.compiler.options import CHOICES, CalibrationMethod, CompileOptions, QUANT_OPTIONS, QuantOptions
from vtakit.compiler.quant.int8 import first_sample_shapes
from vtakit.compiler.quant.recipe import recipe_table
from vtakit.compiler.quant.recipe_search import float_and_int8_auto
from vtakit.compiler.quant.techniques import catalog  # noqa: F401  (each technique's option: its flag)
from vtakit.devices import device_names
from vtakit.errors import CompileError, VtaError, one_line, pc_side_missing
from vtakit.files import check_archive, regular_file
from vtakit.isa.config import DEFAULT_PRESET, HwConfig

_MISSING = ""  # a PC-side package this command needs and a board's runtime lacks (errors.PC_SIDE)
try:
    from vtakit.compiler.frontend.onnx_import import import_onnx
    from vtakit.compiler.pipeline import compile_module, optimize
    from vtakit.compiler.quant.accuracy import accuracy_report
    from vtakit.scheduling.log import tuning_context
except ImportError as missing:  # a board's runtime runs modules; compiling says it needs the full install
    _MISSING = pc_side_missing(missing)



MAX_ARRAY_FILE_BYTES = 4 << 30
"""An `--input` or `--calibrate` .npz may expand to at most this much (4 GiB)."""
TRUST_HELP = ("run a module not signed with this machine's key (compiled elsewhere, e.g. on the PC for a board): "
              "its hashes and fields are still checked; use it only for modules whose origin you trust")


def _load_arrays(path: str, what: str) -> dict[str, np.ndarray] | np.ndarray:
    p = regular_file(path, f"{what} file")
    if p.suffix == ".npz" and zipfile.is_zipfile(p):  # a damaged one is np.load's to name, as before
        check_archive(p, f"{what} file", MAX_ARRAY_FILE_BYTES)
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        return np.load(p, allow_pickle=False)
    except Exception as e:  # a damaged file can raise many kinds
        raise VtaError(f"cannot read {what} file {path}: {e}") from None


def _input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]] | None:
    if not specs:
        return None
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            sep = ""
        if not sep or not name:
            raise VtaError(f"--input-shape takes NAME=D0,D1,..., got {spec!r}")
    return shapes


def _calibration(path: str | None, module_inputs: list[str] | None = None):
    """A list of samples from a .npy (N, *shape) or a .npz of such arrays by input name."""
    if path is None:
        return None
    data = _load_arrays(path, "calibration")
    if isinstance(data, np.ndarray):
        return [data[i] for i in range(data.shape[0])]
    counts = {k: v.shape[0] for k, v in data.items()}
    if len(set(counts.values())) != 1:
        raise VtaError(f"calibration arrays hold different sample counts: {counts}")
    n = next(iter(counts.values()))
    return [{k: v[i] for k, v in data.items()} for i in range(n)]


def _bindings(specs: list[str] | None) -> dict[str, object] | None:
    """--bind NAME=VALUE (repeatable): VALUE a number, true/false, or numbers separated by commas (1-D); the
    compiler checks each against its input's type and shape (compiler/frontend/bound.py)."""
    if not specs:
        return None
    values: dict[str, object] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep or not name or not text:
            raise VtaError(f"--bind takes NAME=VALUE, got {spec!r}")
        items = [_number(v.strip(), spec) for v in text.split(",")]
        values[name] = items if "," in text else items[0]
    return values


def _number(text: str, spec: str) -> object:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise VtaError(f"--bind takes numbers or true/false as values, got {spec!r}")


def cmd_compile(args) -> int:
    require_full_install(_MISSING, "vtakit compile")
    cal = _calibration(args.calibrate)
    t0 = time.perf_counter()
    options = CompileOptions(target=args.target, host=args.host, quant=_quant_options(args),
                             input_shapes=_input_shapes(args.input_shape), bind=_bindings(args.bind),
                             partition=dict(first_conv=args.first_conv, classifier=args.classifier))
    with _limits(args), tuning_context(args.tuning_log) as table, _search_progress(True) as progress:
        module = compile_module(args.model, args.config, options, calibrate=cal, progress=progress,
                                cache=False if args.no_cache else None)
    if args.host_targets:
        with console.status(f"compiling the host kernels for {args.host_targets}"):
            held = module.build_host_kernels(args.host_targets)
        console.print("host kernels ahead of time: " + ", ".join(f"{n} kernels for {t}" for t, n in held.items()))
    out = module.save(args.output)
    notes = module.notes
    if table is not None:
        console.print(f"{len(table.used)} convolution workloads use tuned schedules from {args.tuning_log} "
                      f"({len(table)} in the log for any configuration)")
    console.print(f"compiled {args.model}: {notes.source_nodes} ONNX nodes -> {len(module.graph.nodes)} "
                  f"({len(module.vta_tasks())} accelerator tasks) in {time.perf_counter() - t0:.1f} s -> {out}")
    console.print(module_macs(module).line())
    if notes.cached_from:
        console.print(f"from the compile cache ({notes.cached_from}; --no-cache compiles afresh)")
    elif notes.step_s:
        console.print(notes.step_line())
    if notes.defaulted_dims:
        console.print(f"symbolic input dimensions set to 1: {', '.join(notes.defaulted_dims)} "
                      f"(use --input-shape NAME=D0,D1,...)")
    cal_notes = notes.calibration
    if cal_notes is not None and cal_notes.synthetic:
        console.print(f"[yellow]calibrated on {cal_notes.samples} seeded random inputs[/] (no --calibrate "
                      f"given); accuracy on real data needs real samples")
    if cal_notes is not None:
        _print_search_notes(cal_notes)
    for line in host_reason_lines(notes.host_reasons):
        console.print(f"  on the host: {line}")
    gpu = notes.gpu
    if gpu:
        launches = sum(len(k) for k in gpu["kernels"].values())
        console.print(f"GPU: {launches} kernel launches for {len(gpu['kernels'])} nodes, {gpu['ptx_kernels']} distinct "
                      f"PTX kernels for {gpu['arch']}")
    return 0


def _print_report(rep) -> None:
    """The per-layer table and the totals of a module's last run (`run --report`, `report`)."""
    console.print(rep.table())
    for line in rep.summary_lines():
        console.print(line)


def _write_roofline(rep, path: str, say) -> None:
    """--plot PATH: the roofline PNG of the run's accelerator tasks; like every file, written only when asked."""
    if not rep.accelerator_cycles:
        print(f"warning: no roofline written to {path}: the run had no accelerator tasks", file=sys.stderr)
        return
    say(f"roofline written to {rep.roofline(path)}")


def cmd_run(args) -> int:
    module = CompiledModule.load(args.module, max_bytes=_max_module_bytes(args), trust=args.trust)
    data = _load_arrays(args.input, "input")
    t0 = time.perf_counter()
    outputs = _run_warning_in_one_line(module, data, device=args.device, timeout_s=args.timeout,
                                       strict=args.strict)
    console.print(f"ran {args.module} on {args.device} in {time.perf_counter() - t0:.2f} s")
    for name, value in outputs.items():
        flat = value.reshape(value.shape[0], -1) if value.ndim > 1 else value.reshape(1, -1)
        argmax = flat.argmax(axis=1)[:16] if flat.size else "-"
        console.print(f"{name}: {value.dtype} {tuple(value.shape)}; argmax per row {argmax}")
    if args.output:
        _save_outputs(args.output, outputs)
        console.print(f"outputs written to {args.output}")
    if args.report:
        _print_report(module.report())
    if args.plot:
        _write_roofline(module.report(), args.plot, console.print)
    return 0


def _run_warning_in_one_line(module, data, **kwargs) -> dict[str, np.ndarray]:
    """module.run, each warning it gives (NaN/Inf inputs, ...) printed as one `warning:` line on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = module.run(data, **kwargs)
    for w in caught:
        hint = " (--strict makes this an error)" if issubclass(w.category, NonFiniteInputWarning) else ""
        print(f"warning: {one_line(str(w.message))}{hint}", file=sys.stderr)
    return outputs


def _max_module_bytes(args) -> int | None:
    """--max-module-mb in bytes (None: the default cap, see compiler.module.container)."""
    mb = getattr(args, "max_module_mb", None)
    if mb is None:
        return None
    if not 0 < mb < float("inf"):
        raise VtaError(f"--max-module-mb must be a positive number, got {mb}")
    return int(mb * (1 << 20))


def _save_outputs(path: str, outputs: dict[str, np.ndarray]) -> None:
    """Write the outputs (.npz by name, or .npy for one), creating missing folders as `sim --trace` does."""
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.endswith(".npz") or len(outputs) > 1:
            np.savez(out, **outputs)
        else:
            np.save(out, next(iter(outputs.values())))
    except OSError as e:
        raise VtaError(f"cannot write the outputs to {path}: {e.strerror or e}") from None


def _choice(option: str) -> dict:
    """argparse's `choices` for a compile option: its enum's spellings (compiler/options.py)."""
    return dict(choices=CHOICES[option].values())


def _int8_options(p) -> None:
    """The quantization options `compile` and `report --accuracy` share: one flag per option in
    `QUANT_OPTIONS` (its choices and help; a bool option is --name / --no-name), the registered techniques'
    included, then the layers kept float (an option not given keeps its default)."""
    for option in QUANT_OPTIONS.values():
        if option.kind is bool:
            p.add_argument(option.flag, action=argparse.BooleanOptionalAction, default=None, help=option.help)
        else:
            p.add_argument(option.flag, choices=option.kind.values(), help=option.help)
    p.add_argument("--keep-float", default="", help="NODE,... nodes kept in float on the host")
    p.add_argument("--host-int8", action="store_true", default=None,
                   help="quantize also the convs, dense layers and adds the accelerator would not take (by default "
                        "they stay float on the host: int8 there buys no speed and costs accuracy)")
    p.add_argument("--keep-float-until", type=float, metavar="COSINE",
                   help="also keep the worst layers in float, one at a time, until the mean output cosine on the "
                        "calibration samples reaches COSINE (at most 8 layers; they are printed)")


def _limit_options(p) -> None:
    """What an ONNX model may make the compiler allocate (compiler.frontend.limits)."""
    p.add_argument("--max-tensor-mb", type=float, help="the largest tensor a model may declare, hold or fold to, "
                                                       "in MiB (default 512)")
    p.add_argument("--max-model-mb", type=float, help="the most a model's file and external data, or its constants "
                                                      "and activations together, may hold, in MiB (default 1024)")


def _limits(args):
    return use_limits(getattr(args, "max_tensor_mb", None), getattr(args, "max_model_mb", None))


def _quant_flags() -> tuple[str, ...]:
    """The QuantOptions fields the command line sets by flags of the same name (None: not given): every
    option in `QUANT_OPTIONS`, keep_float_until and host_int8."""
    return (*QUANT_OPTIONS, "keep_float_until", "host_int8")


def _quant_options(args) -> QuantOptions:
    """The quantization options the user gave (the rest keep QuantOptions' defaults)."""
    given = {k: getattr(args, k) for k in _quant_flags() if getattr(args, k) is not None}
    return QuantOptions.of(None, **given, keep_float=_keep_float(args.keep_float), seed=args.seed)


def _searches(options: QuantOptions, calibrated: bool) -> bool:
    """Whether the options ask for a search judged at the outputs (slow: a progress bar): the exponent
    search, keep-float-until, or, on real calibration samples, the recipe's auto knobs (recipe_search.py)."""
    return options.calibration is CalibrationMethod.SEARCH or options.keep_float_until is not None \
        or (calibrated and bool(options.auto_knobs()))


@contextmanager
def _search_progress(enabled: bool):
    """A progress callback (phase, done, total) drawing one rich bar per phase (the pipeline's steps on one
    bar), or None."""
    if not enabled or not progress_console.is_terminal:  # a bar on a pipe or a file leaves only a blank line
        yield None
        return

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=progress_console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def update(phase: str, done: int, total: int) -> None:
            key = "compile" if phase.startswith("compile: ") else phase  # the pipeline's steps share one bar
            if key not in tasks:
                tasks[key] = bar.add_task(phase, total=total)
            bar.update(tasks[key], completed=done, total=total, description=phase)

        yield update


def _print_search_notes(notes: QuantNotes) -> None:
    """What calibration "search", a QDQ model's scales and --keep-float-until did."""
    for line in calibration_lines(notes):
        console.print(line)


def _keep_float(spec: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    if spec.strip() and not names:
        raise CompileError(f"--keep-float {spec[:40]!r} names no node")
    return names


def cmd_accuracy(args) -> int:
    """`report MODEL --accuracy`: the float and int8 graphs side by side, per layer."""
    require_full_install(_MISSING, "vtakit report --accuracy")
    cal = _calibration(args.calibrate)
    with _limits(args):
        graph = optimize(import_onnx(args.module, _input_shapes(args.input_shape), bind=first_sample_shapes(cal)))
    data = _load_arrays(args.input, "input") if args.input else None
    if data is None:
        rng = np.random.default_rng(args.seed)
        data = {n: rng.standard_normal(graph.tensors[n].shape).astype(np.float32) for n in graph.inputs}
        console.print(f"no --input: comparing on seeded random inputs (seed {args.seed})")
    if isinstance(data, np.ndarray):
        if len(graph.inputs) != 1:
            raise VtaError(f"--input .npy feeds one input; the model has {len(graph.inputs)}: use an .npz")
        data = {graph.inputs[0]: data}
    options = _quant_options(args)
    cfg = HwConfig.load(args.config or DEFAULT_PRESET)
    with _search_progress(_searches(options, cal is not None)) as progress:
        fg, qg, notes = float_and_int8_auto(graph, cfg, cal, options, progress=progress)
    if notes.synthetic:
        console.print("[yellow]calibrated on seeded random inputs[/] (no --calibrate given)")
    rep = accuracy_report(fg, qg, data)
    console.print(rep.table())
    for line in rep.summary_lines():
        console.print(line)
    console.print(f"calibration {notes.method} on {notes.samples} samples; equalize {notes.equalize}, "
                  f"bias correction {notes.bias_correction}; requantization {notes.requant} ({cfg.label})")
    _print_search_notes(notes)
    if (table := recipe_table(notes)) is not None:
        console.print(table)
    if args.plot:
        console.print(f"plot written to {rep.plot(args.plot)}")
    return 0


def cmd_report(args) -> int:
    if args.accuracy:
        if args.json:
            raise VtaError("--json prints a module's report; the --accuracy comparison prints tables only")
        return cmd_accuracy(args)
    accuracy_only = {"--calibrate": args.calibrate, "--input-shape": args.input_shape, "--config": args.config,
                     "--keep-float": args.keep_float or None,
                     **{f"--{k.replace('_', '-')}": getattr(args, k) for k in _quant_flags()}}
    given = [flag for flag, value in accuracy_only.items() if value is not None]
    if given:  # a module is already compiled: these would be ignored without a word
        raise VtaError(f"{', '.join(given)} only apply with --accuracy (a module is already compiled)")
    module = CompiledModule.load(args.module, max_bytes=_max_module_bytes(args), trust=args.trust)

    def say(line: str) -> None:
        """A line for the user: on stderr with --json, so that stdout holds the JSON alone."""
        if args.json:
            print(line, file=sys.stderr)
        else:
            console.print(line)

    if args.input:
        data = _load_arrays(args.input, "input")
    else:
        rng = np.random.default_rng(args.seed)
        data = {n: rng.standard_normal(i.shape).astype(i.dtype) for n, i in module.inputs.items()}
        say(f"no --input: running on seeded random inputs (seed {args.seed})")
    _run_warning_in_one_line(module, data, device=args.device)
    rep = module.report()
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2, allow_nan=False, default=_json_number))
    else:
        _print_report(rep)
    if args.plot:
        _write_roofline(rep, args.plot, say)
    return 0


def _json_number(value):
    """A numpy scalar (a device's counter) as the JSON number it is; anything else stays a TypeError."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _plot_options(p, what: str) -> None:
    """--plot PATH (no default: no file is written unasked), and --roofline, its old spelling."""
    p.add_argument("--plot", metavar="PNG", type=png_path, help=what)
    p.add_argument("--roofline", dest="plot", action=DeprecatedAlias, new="--plot", type=png_path,
                   help="deprecated spelling of --plot")


def register(sub) -> None:
    c = sub.add_parser("compile", help="compile an ONNX model into a .vtamod module")
    c.add_argument("model", help="ONNX file")
    c.add_argument("--config", help=CONFIG_HELP)
    c.add_argument("--target", default="vta", **_choice("target"),
                   help="cpu / cuda: the whole float graph on the host CPU / on the GPU")
    c.add_argument("--host", default="cpu", **_choice("host"),
                   help="where the host tasks of an accelerator module run (cuda: the GPU)")
    c.add_argument("--calibrate", help=".npy of N stacked samples, or .npz of them by input name")
    c.add_argument("--input-shape", action="append", help="NAME=D0,D1,... for symbolic dimensions")
    c.add_argument("--bind", action="append", metavar="NAME=VALUE",
                   help="fix an input to a value at compile time (repeatable; e.g. sr=16000): it becomes a constant, "
                        "an If it decides is inlined, and the module no longer takes it")
    c.add_argument("--first-conv", default="vta", choices=["vta", "host"])
    c.add_argument("--classifier", default="vta", choices=["vta", "host"])
    c.add_argument("--seed", type=int, default=0, help="seed of the synthetic calibration inputs")
    c.add_argument("--tuning-log", help="use the best schedules this `vtakit tune` log recorded")
    c.add_argument("--no-cache", action="store_true",
                   help="compile afresh: neither load nor store the module in the compile cache "
                        "(~/.cache/vtakit or $VTAKIT_CACHE_DIR)")
    _int8_options(c)
    _limit_options(c)
    c.add_argument("--host-targets", metavar="CPU,...", help="also compile the host kernels ahead of time for "
                   "these CPUs (armv7: Zynq-7000 PYNQ boards, aarch64: UltraScale+, x86_64), carried in the module "
                   "for a board without llvmlite (linked with the ziglang wheel)")
    c.add_argument("-o", "--output", default="model.vtamod")
    c.set_defaults(func=cmd_compile)

    r = sub.add_parser("run", help="run a compiled module on a device")
    r.add_argument("module")
    r.add_argument("--input", required=True, help=".npy (single input) or .npz by input name")
    r.add_argument("--output", help=".npy or .npz for the outputs")
    r.add_argument("--device", default="sim", choices=device_names())
    r.add_argument("--timeout", type=float, help="seconds per accelerator task")
    r.add_argument("--report", action="store_true", help="print the per-layer table")
    _plot_options(r, "write the roofline of the accelerator tasks to this PNG")
    r.add_argument("--strict", action="store_true", help="inputs holding NaN or infinities are an error "
                                                         "(default: a warning)")
    r.add_argument("--max-module-mb", type=float, help="cap on the module's decompressed size (default 2048, "
                                                       "or VTAKIT_MAX_MODULE_MB)")
    r.add_argument("--trust", action="store_true", help=TRUST_HELP)
    r.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="run a module and print where the time goes (--plot: a roofline PNG); "
                                      "with --accuracy, compare an ONNX model's int8 graph with its float one")
    p.add_argument("module", help=".vtamod module (with --accuracy: the ONNX model)")
    p.add_argument("--accuracy", action="store_true",
                   help="per layer SQNR / cosine of int8 against float, exponents, clipped fractions, a PNG plot")
    p.add_argument("--calibrate", help="with --accuracy: .npy of N stacked samples, or .npz by input name")
    p.add_argument("--input-shape", action="append", help="with --accuracy: NAME=D0,D1,... for symbolic dims")
    p.add_argument("--config", help="with --accuracy: the configuration whose requantization the int8 graph uses "
                                    "(multipliers where it has ALU MUL); " + CONFIG_HELP)
    _int8_options(p)
    _limit_options(p)
    p.add_argument("--input", help=".npy or .npz (default: seeded random inputs)")
    p.add_argument("--device", default="sim", choices=device_names())
    _plot_options(p, "write the roofline of the accelerator tasks to this PNG (with --accuracy: the per-layer "
                     "accuracy plot)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON (and nothing else on stdout)")
    p.add_argument("--max-module-mb", type=float, help="cap on the module's decompressed size (default 2048, "
                                                       "or VTAKIT_MAX_MODULE_MB)")
    p.add_argument("--trust", action="store_true", help=TRUST_HELP)
    p.set_defaults(func=cmd_report)
