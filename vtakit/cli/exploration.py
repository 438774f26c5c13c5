"""`vtakit explore`: sweep accelerator configurations for a network; CSV, Pareto PNG and summary out."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from vtakit.cli._common import console, require_full_install
from vtakit.errors import VtaError, pc_side_missing

_MISSING = ""  # a PC-side package this command needs and a board's runtime lacks (errors.PC_SIDE)
try:
    from vtakit.scheduling.design_space import load_space
    from vtakit.scheduling.executor import executor
    from vtakit.scheduling.explore import check_network, explore
    from vtakit.scheduling.explore_report import write_outputs
except ImportError as missing:  # a board's runtime: `vtakit explore` says it needs the full install
    _MISSING = pc_side_missing(missing)


def _results_table(result) -> Table:
    have_resources = any(r.get("lut") is not None for r in result.records)
    t = Table(title=f"vtakit explore: {result.network}")
    timed = any(r.get("fmax_mhz") is not None for r in result.records)
    cols = ["#", "point", "latency ms", "util %", "cosine"]
    cols += ["est. fmax", "ms at achievable clock"] if timed else []
    cols += ["LUT", "BRAM36", "DSP", "smallest part"] if have_resources else []
    for c in cols + ["Pareto", "status"]:
        t.add_column(c, justify="left" if c in ("point", "status", "smallest part") else "right")
    for r in result.records:
        row = [str(r["index"]), r["point"],
               f"{r['latency_ms']:.2f}" if r["latency_ms"] is not None else "",
               f"{100 * r['utilization']:.1f}" if r["utilization"] is not None else "",
               f"{r['cosine']:.4f}" if r.get("cosine") is not None else ""]
        if timed:
            fmax = r.get("fmax_mhz")
            row += ["" if fmax is None else f"{fmax:.0f}" if r["clock_ok"] else f"[red]{fmax:.0f} < {r['clock_mhz']:g}[/]",
                    f"{r['latency_ms_achievable']:.2f}" if r.get("latency_ms_achievable") is not None else ""]
        if have_resources:
            row += [f"{r['lut']:,}" if r.get("lut") is not None else "",
                    f"{r['bram36']:g}" if r.get("bram36") is not None else "",
                    f"{r['dsp']:,}" if r.get("dsp") is not None else "", r.get("smallest_part") or ""]
        row += ["yes" if r["pareto"] else "",
                "ok" if r["status"] == "ok" else f"[red]{r['failed_stage']}[/]: {r['reason']}"]
        t.add_row(*row)
    return t


def cmd_explore(args) -> int:
    require_full_install(_MISSING, "vtakit explore")
    space = load_space(args.space)
    opts = space.options
    network = args.network or opts.network
    if not network:
        raise VtaError(f"no network: pass --network or set [options] network in {args.space}")
    check_network(network)
    parts = tuple(args.parts.split(",")) if args.parts else opts.parts
    synth = opts.synth and not args.no_synth
    where = f"Dask at {args.dask}" if args.dask else ("inline" if args.workers == 0 else
                                                       f"{args.workers or 'one per core'} local workers")
    console.print(f"exploring {len(space.points)} configurations of {args.space} for {network} on {where}"
                  + ("" if synth else " (no synthesis)"))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with executor(dask=args.dask, workers=args.workers, dead_after_s=args.dask_timeout) as ex, \
            Progress(*columns, console=console) as bar:
        task = bar.add_task("jobs", total=None)

        def progress(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=f"jobs ({what})"[:70])

        result = explore(network, space.points, ex, args.output, synth=synth, parts=parts,
                         part=args.part or opts.part, images=opts.images, seed=opts.seed, progress=progress,
                         tuning_logs=args.tuning_log or (), resume=not args.fresh)
    files = write_outputs(result, args.output, space=str(args.space))
    console.print(_results_table(result))
    lat = "latency_ms_achievable" if any(r.get("latency_ms_achievable") is not None for r in result.records) \
        else "latency_ms"
    front = [f"#{r['index']}" for r in sorted(result.records, key=lambda r: r[lat] or 0) if r["pareto"]]
    failed = sum(r["status"] != "ok" for r in result.records)
    console.print(f"Pareto set: {', '.join(front) or 'empty'}; {failed} failed; {result.wall_s:.0f} s"
                  + (f" ({result.reused_jobs} jobs from the earlier run's log)" if result.reused_jobs else ""))
    console.print("written: " + ", ".join(str(p) for p in files.values()))
    return 0


def register(sub) -> None:
    e = sub.add_parser("explore", help="sweep accelerator configurations for a network: latency, resources, "
                                       "Pareto front")
    e.add_argument("--space", required=True, help="SPACE.toml: [base], [sweep], [[point]], [options]")
    e.add_argument("--network", help="zoo model name or .onnx file (default: the space's [options] network)")
    e.add_argument("--dask", metavar="ADDRESS", help="run jobs on this Dask scheduler (tcp://host:8786)")
    e.add_argument("--dask-timeout", type=float, default=60.0, metavar="S",
                   help="give up when the Dask cluster has had no worker (or no scheduler) for S seconds")
    e.add_argument("--workers", type=int, help="local worker processes (default one per core; 0: inline)")
    e.add_argument("--no-synth", action="store_true", help="latency only: no Yosys resource estimates")
    e.add_argument("--parts", help="comma-separated parts to check the fit on (default: the space's, else all)")
    e.add_argument("--part", help="the part whose family's resource figures the Pareto front uses")
    e.add_argument("--tuning-log", action="append", metavar="LOG",
                   help="a `vtakit tune` log: layers it tuned on a point's exact configuration use the best schedule")
    e.add_argument("--fresh", action="store_true", help="ignore the job log of an earlier run in the output folder")
    e.add_argument("-o", "--output", required=True,
                   help="output folder (CSV, PNG, summary, job log; a rerun resumes from its job log)")
    e.set_defaults(func=cmd_explore)
