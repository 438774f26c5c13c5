"""`vtakit tune` and `vtakit bench tuner`: schedule search on the cycle model (or RTL, or a board)."""

from __future__ import annotations

import json
import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from vtakit.cli._common import CONFIG_HELP, console, load_config, progress_console, require_full_install
from vtakit.errors import VtaError, pc_side_missing

_MISSING = ""  # a PC-side package this command needs and a board's runtime lacks (errors.PC_SIDE)
try:
    from vtakit.scheduling.executor import executor
    from vtakit.scheduling.log import TuningLog
    from vtakit.scheduling.measure import Measurer
    from vtakit.scheduling.model import TrainingSet
    from vtakit.scheduling.schedule_space import ConvSpace
    from vtakit.scheduling.task import workload_tasks
    from vtakit.scheduling.tune import tune_task
    from vtakit.scheduling.tuner_race import TARGET, race, ratio_summary
    from vtakit.scheduling.tuners import TUNERS
except ImportError as missing:  # a board's runtime: `vtakit tune` says it needs the full install
    _MISSING = pc_side_missing(missing)
    TUNERS = {}


def _tasks(args):
    cfg = load_config(args.config)
    layers = [x.strip() for x in args.layers.split(",") if x.strip()] if args.layers else None
    return cfg, workload_tasks(args.workload, cfg, layers)


def _check_counts(args) -> None:
    for name in ("trials", "batch"):
        if getattr(args, name) < 1:
            raise VtaError(f"--{name} must be >= 1, got {getattr(args, name)}")


def cmd_tune(args) -> int:
    require_full_install(_MISSING, "vtakit tune")
    _check_counts(args)
    cfg, tasks = _tasks(args)
    measurer = Measurer(args.device, check=not args.no_check)
    log = TuningLog(args.log)
    training = TrainingSet()
    results = []
    where = f"Dask at {args.dask}" if args.dask else f"{args.workers or 'one per core'} local workers"
    console.print(f"tuning {len(tasks)} layers of {args.workload} on {cfg.label} with {args.tuner}, "
                  f"{args.trials} trials each, measured on {args.device} ({where}); log {args.log}")
    spaces = {task.key: ConvSpace(task) for task in tasks}
    if args.tuner == "xgb":             # every layer's earlier records seed the model (transfer)
        for task in tasks:
            for rec in log.for_task(task.key, cfg):
                point = spaces[task.key].point_of(rec["schedule"])
                if point is not None:
                    space = spaces[task.key]
                    training.add(task.key, space.features[space.index(point)], rec["cycles"])
    started = time.perf_counter()
    with executor(args.dask, args.workers, dead_after_s=args.dask_timeout) as ex, Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("best {task.fields[best]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=progress_console, transient=False) as bar:
        for task in tasks:
            space = spaces[task.key]
            training.groups.pop(task.key, None)     # tune_task replays the task's own records itself
            line = bar.add_task(f"{task.name} ({len(space):,} schedules fit)", total=args.trials, best="-")

            def report(t, done, total, best, line=line):
                bar.update(line, completed=min(done, total), best=f"{best:,}" if best else "-")

            results.append(tune_task(task, executor=ex, tuner=args.tuner, trials=args.trials, measurer=measurer,
                                     log=log, training=training if args.tuner == "xgb" else None,
                                     seed=args.seed, batch=args.batch, space=space, progress=report))
    _print_tuned(results, cfg, time.perf_counter() - started)
    return 0


def _print_tuned(results, cfg, seconds: float) -> None:
    table = Table(title=f"tuned on {cfg.label} ({seconds:.0f} s)")
    for col in ("layer", "trials", "default cycles", "tuned cycles", "speed-up", "util before", "util after"):
        table.add_column(col, justify="right")
    macs = before = after = 0
    for r in results:
        t = r.task
        util = (lambda c: f"{100 * t.peak_cycles / c:.1f} %" if c else "-")
        speedup = f"{r.default_cycles / r.best_cycles:.3f}" if r.default_cycles and r.best_cycles else "-"
        table.add_row(t.name, str(r.trials), f"{r.default_cycles:,}" if r.default_cycles else "-",
                      f"{r.best_cycles:,}" if r.best_cycles else "-", speedup, util(r.default_cycles),
                      util(r.best_cycles))
        if r.default_cycles and r.best_cycles:
            macs += t.macs * t.repeats
            before += r.default_cycles * t.repeats
            after += r.best_cycles * t.repeats
    console.print(table)
    timed_out = sum(r.timed_out for r in results)
    if timed_out:
        console.print(f"{timed_out} measurement(s) stopped by the wall clock were not logged; "
                      f"a rerun with the same log measures them again")
    if before:
        peak = cfg.peak_macs_per_cycle
        console.print(f"MAC-weighted utilization (repeats counted): default {100 * macs / (before * peak):.1f} %, "
                      f"tuned {100 * macs / (after * peak):.1f} %; total cycles {before:,} -> {after:,} "
                      f"({100 * (before - after) / before:.1f} % fewer)")


def cmd_bench_tuner(args) -> int:
    require_full_install(_MISSING, "vtakit bench tuner")
    _check_counts(args)
    if args.seeds < 1:
        raise VtaError(f"--seeds must be >= 1, got {args.seeds}")
    cfg, tasks = _tasks(args)
    with executor(args.dask, args.workers, dead_after_s=args.dask_timeout) as ex, Progress(
            TextColumn("{task.description}"), TimeElapsedColumn(), console=progress_console, transient=True) as bar:
        line = bar.add_task("tuner race")
        rows = race(tasks, executor=ex, trials=args.trials, seeds=args.seeds, batch=args.batch,
                    measurer=Measurer(args.device, check=not args.no_check),
                    progress=lambda what: bar.update(line, description=what))
    summary = ratio_summary(rows, args.trials)
    if args.json:
        print(json.dumps([{k: r[k] for k in ("name", "xgb_trials", "random_trials", "best_cycles")} for r in rows]))
        return 0
    table = Table(title=f"trials to reach {TARGET:.0%} of the best schedule (median of {args.seeds} seeds, "
                        f"{args.trials} trials per run, config {cfg.label})")
    for col in ("layer", "best cycles", "xgb", "random", "xgb / random", "xgb per seed", "random per seed"):
        table.add_column(col, justify="right")
    show = (lambda v: f">{args.trials}" if v is None else f"{v:g}")
    for r, ratio in zip(rows, summary["ratios"]):
        best = f"{r['best_cycles']:,}" if r["best_cycles"] else "none worked"
        table.add_row(r["name"], best, show(r["xgb_trials"]), show(r["random_trials"]),
                      f"{ratio:.2f}", " ".join(show(v) for v in r["xgb_per_seed"]),
                      " ".join(show(v) for v in r["random_per_seed"]))
    console.print(table)
    console.print(f"median ratio xgb / random over layers: {summary['median_ratio']:.2f} "
                  f"(runs that never got there count as {args.trials + 1})")
    return 0


def add_measure_options(p, trials: int) -> None:
    """Options `tune` and `bench tuner` share: the layers, the trial budget and where candidates run."""
    p.add_argument("--workload", default="resnet18", help="layer table (resnet18)")
    p.add_argument("--layers", help="comma-separated layer names (default: the layers VTA offloads, C2-C11)")
    p.add_argument("--trials", type=int, default=trials, help="measurements per layer")
    p.add_argument("--dask", metavar="ADDR", help="measure on this Dask scheduler (tcp://host:8786)")
    p.add_argument("--dask-timeout", type=float, default=60.0, metavar="S",
                   help="give up when the Dask cluster has had no worker (or no scheduler) for S seconds")
    p.add_argument("--workers", type=int, help="local worker processes (default one per core; 0: inline)")
    p.add_argument("--device", default="sim", help="where candidates run: sim (cycle model), rtl, pynq, pynq-sim")
    p.add_argument("--no-check", action="store_true", help="do not compare each result with numpy")
    p.add_argument("--batch", type=int, default=8, help="candidates proposed (and measured in parallel) at once")


def register(sub) -> None:
    t = sub.add_parser("tune", help="search schedules for a workload's layers, logging every measurement")
    t.add_argument("--config", help=CONFIG_HELP)
    add_measure_options(t, 200)
    t.add_argument("--tuner", default="xgb", choices=TUNERS or None)
    t.add_argument("--log", required=True, help="JSON-lines tuning log (appended; a rerun resumes from it)")
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(func=cmd_tune)
