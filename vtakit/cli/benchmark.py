"""`vtakit bench conv2d|dense|tuner`: what the accelerator and its compiler achieve on your
configuration (cycles, utilization, bit-exact results; trials to a good schedule), as tables or JSON.

Each benchmark is its own subcommand with only its own options, so a flag that
one of them does not read is an error rather than silently ignored.  The speed of vtakit's own code
(the simulators, the instruction codec) is measured by benchmarks/sim_speed.py and
benchmarks/isa_speed.py in the repository, not by the installed command."""

from __future__ import annotations

import json

from rich.progress import Progress

from vtakit.cli._common import CONFIG_HELP, console, load_config, print_rows, progress_console, require_full_install
from vtakit.cli.tuning import add_measure_options, cmd_bench_tuner
from vtakit.compiler.backends.vta.layer_runs import run_layer, select, summary
from vtakit.errors import pc_side_missing
from vtakit.isa.config import HwConfig

_MISSING = ""  # a PC-side package this command needs and a board's runtime lacks (errors.PC_SIDE)
try:
    from vtakit.scheduling.log import tuning_context
except ImportError as missing:  # a board's runtime: `bench` runs without tuning logs
    _MISSING = pc_side_missing(missing)


def cmd_bench_layers(args) -> int:
    require_full_install(_MISSING, "vtakit bench")

    cfg = load_config(args.config)
    what = args.bench
    layers = select(args.workload, what, args.layers.split(",") if args.layers else None)
    rows = []
    with tuning_context(args.tuning_log), Progress(console=progress_console, transient=True,
                                                   disable=args.json) as progress:
        task = progress.add_task(f"{what} on {args.device}", total=len(layers))
        for layer in layers:
            progress.update(task, description=f"{layer.name} on {args.device}")
            rows.append(run_layer(layer, cfg, args.device, args.vthreads))
            progress.advance(task)
    keys = ["name", "macs", "cycles", "utilization", "compute_bound", "gops", "correct"]
    if args.device == "rtl":
        keys[3:3] = ["model_cycles", "model_error_pct"]
    if args.json:
        print(json.dumps([{k: r[k] for k in keys} for r in rows], indent=2))
        return 0 if all(r["correct"] for r in rows) else 1
    print_rows(f"vtakit bench {what} --workload {args.workload} (config {cfg.label}, device "
               f"{args.device}, vthreads {args.vthreads or 'default'}"
               f"{', schedules from ' + args.tuning_log if args.tuning_log else ''})",
               rows, keys + ["repeats", "instructions", "packing", "compile_s", "run_s"])
    _print_layer_summary(rows, cfg)
    if args.device == "rtl":
        worst = max(rows, key=lambda r: abs(r["model_error_pct"]))
        console.print(f"cycle model vs RTL: largest error {worst['model_error_pct']:+.2f} % ({worst['name']}); "
                      f"model_error_pct = 100 * (model - RTL) / RTL")
    ok = all(r["correct"] for r in rows)
    console.print(f"all results match numpy: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


def _print_layer_summary(rows: list[dict], cfg: HwConfig) -> None:
    groups = {"all layers": rows, "layers VTA offloads": [r for r in rows if r["vta_offloads"]]}
    for label, group in groups.items():
        if label != "all layers" and len(group) == len(rows):
            continue
        s = summary(group, cfg)
        if group and s["weighted_utilization"] is not None:
            console.print(f"{label} ({', '.join(r['name'] for r in group)}): total cycles, repeats counted, "
                          f"{s['total_cycles']:,}; MAC-weighted utilization {s['weighted_utilization'] * 100:.1f} %")


def register(sub) -> None:
    b = sub.add_parser("bench", help="measure and print figures")
    bench = b.add_subparsers(dest="bench", required=True)
    for what in ("conv2d", "dense"):
        p = bench.add_parser(what, help=f"compile and run the workload's {what} layers, bit-exact against numpy")
        p.add_argument("--config", help=CONFIG_HELP)
        p.add_argument("--workload", default="resnet18", help="layer table (resnet18)")
        p.add_argument("--layers", help="comma-separated layer names (default all)")
        p.add_argument("--device", default="sim",
                       help="sim (cycle), fsim (functional) or rtl (also reports the cycle model's error)")
        p.add_argument("--vthreads", type=int, help="force this many virtual threads")
        p.add_argument("--tuning-log", help="use the best schedules of this tuning log")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_bench_layers)

    t = bench.add_parser("tuner", help="trials the XGBoost tuner and random search need to reach 95 %% of the best")
    t.add_argument("--config", help=CONFIG_HELP)
    add_measure_options(t, trials=100)
    t.add_argument("--seeds", type=int, default=3, help="seeds per tuner (the median is reported)")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_bench_tuner)
