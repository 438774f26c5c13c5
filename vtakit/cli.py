"""The `vtakit` command line (also `python -m vtakit`).

Each subcommand is a small function over the library; errors a user can cause
arrive as one `error: ...` line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from vtakit.errors import VtaError
from vtakit.isa.config import PRESETS, HwConfig

# Tables stay readable when the output goes to a file or a CI log.
console = Console(width=None if sys.stdout.isatty() else 140)


def _config(spec: str | None) -> HwConfig:
    return HwConfig.load(spec or "pynq")


# ------------------------------------------------------------------ commands
def cmd_config(args) -> int:
    from vtakit.report import config_table, presets_table

    if args.list:
        console.print(presets_table(PRESETS))
        return 0
    cfg = _config(args.name)
    if args.json:
        print(cfg.to_json(), end="")
    else:
        console.print(config_table(cfg))
    return 0


def cmd_asm(args) -> int:
    from vtakit.isa.asm import asm
    from vtakit.isa.encoding import encode_program

    cfg = _config(args.config)
    source = Path(args.source)
    try:
        text = source.read_text()
    except OSError as e:
        raise VtaError(f"cannot read {source}: {e.strerror}") from None
    code = encode_program(asm(text, cfg), cfg)
    out = Path(args.output) if args.output else source.with_suffix(".bin")
    out.write_bytes(code)
    console.print(f"{len(code) // 16} instructions -> {out}")
    return 0


def cmd_disasm(args) -> int:
    from vtakit.isa.asm import disasm
    from vtakit.isa.program import ProgramImage

    path = Path(args.program)
    if path.suffix == ".npz":
        image = ProgramImage.load(path)
        cfg = image.config

        def uops_of(insn):
            start = insn.dram_base * 4
            return image.dram[start:start + insn.x_size * 4 * max(insn.y_size, 1)].tobytes()

        sys.stdout.write(disasm(image.insn_bytes(), cfg, uop_source=uops_of if args.uops else None))
        return 0
    if args.uops:
        raise VtaError("--uops needs a program image (.npz) that holds the micro-ops")
    try:
        code = path.read_bytes()
    except OSError as e:
        raise VtaError(f"cannot read {path}: {e.strerror}") from None
    sys.stdout.write(disasm(code, _config(args.config)))
    return 0


def cmd_sim(args) -> int:
    from vtakit.isa.program import ProgramImage
    from vtakit.report import stats_tables
    from vtakit.sim import run_image

    image = ProgramImage.load(args.program)
    if args.config and _config(args.config) != image.config:
        raise VtaError(f"{args.program} was built for config {image.config.label}, not {args.config}")
    stats, dram = run_image(image, model=args.model, trace=args.trace, timeout_s=args.timeout)
    if args.output:
        np.savez_compressed(args.output, dram=dram)
    if args.json:
        print(json.dumps(stats.to_dict(), indent=2, default=str))
        return 0
    for table in stats_tables(stats):
        console.print(table)
    for name, region in image.regions.items():
        console.print(f"region {name}: {region.shape} {region.dtype} at {region.addr:#x}")
    if stats.trace_path:
        viewer = "GTKWave or Surfer" if args.model == "rtl" else "https://ui.perfetto.dev"
        console.print(f"trace written to {stats.trace_path} (open in {viewer})")
    if args.output:
        console.print(f"final DRAM written to {args.output}")
    return 0


def cmd_demo(args) -> int:
    if args.layer is None:
        from vtakit.cli_net import cmd_demo as network_demo

        return network_demo(args)
    from vtakit.compiler import ops, reference
    from vtakit.compiler.workloads import RESNET18
    from vtakit.report import stats_tables
    from vtakit.sim import SimDevice

    cfg = _config(args.config)
    layers = {layer.name: layer for layer in RESNET18}
    if args.layer not in layers:
        raise VtaError(f"no layer {args.layer!r}; ResNet-18 has {', '.join(layers)}")
    layer = layers[args.layer]
    console.print(f"[bold]vtakit demo[/]: ResNet-18 layer {layer.name} ({layer.c_in}->{layer.c_out} channels, "
                  f"{layer.hw}x{layer.hw}, {layer.kernel}x{layer.kernel} kernel, stride {layer.stride}) with VTA's "
                  f"epilogue (+bias, >>8, clip 0..127), compiled with the default schedule and run on the cycle "
                  f"model of config {cfg.label}")
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, layer.c_in, layer.hw, layer.hw), dtype=np.int8)
    w = rng.integers(-128, 128, (layer.c_out, layer.c_in, layer.kernel, layer.kernel), dtype=np.int8)
    b = rng.integers(-4096, 4096, layer.c_out, dtype=np.int32)
    device = SimDevice(cfg, model="cycle")
    device.trace = args.trace
    y, rep = ops.conv2d(x, w, stride=layer.stride, padding=layer.pad, bias=b, shift=8, clip=(0, 127),
                        config=cfg, device=device, name=layer.name)
    console.print(f"schedule: {rep.schedule}")
    console.print(f"{rep.instructions} instructions, {rep.uop_words} micro-op words, compiled in "
                  f"{rep.compile_s:.2f} s, simulated in {rep.run_s:.2f} s")
    for table in stats_tables(rep.stats):
        console.print(table)
    ok = bool(np.array_equal(y, reference.conv2d(x, w, layer.stride, layer.pad, b, shift=8, clip=(0, 127))))
    console.print(f"{layer.name}: {rep.cycles:,} cycles, {rep.utilization * 100:.1f} % of peak, {rep.gops:.1f} GOPS "
                  f"at {cfg.clock_mhz:g} MHz; result matches numpy: {'[green]yes[/]' if ok else '[red]NO[/]'}")
    console.print(f"trace written to {rep.stats.trace_path} (open in https://ui.perfetto.dev)")
    console.print("more: vtakit bench conv2d --workload resnet18")
    return 0 if ok else 1


def cmd_bench(args) -> int:
    cfg = _config(args.config)
    if args.what in ("conv2d", "dense"):
        return _bench_layers(args, cfg)
    if args.what == "tuner":
        from vtakit.cli_tune import cmd_bench_tuner

        return cmd_bench_tuner(args)
    if args.what == "isa":
        from vtakit.isa.bench import isa_speed

        rows = [isa_speed(cfg, args.count)]
    else:
        from vtakit.sim.bench import PROGRAMS, sim_speed

        programs = args.programs.split(",") if args.programs else list(PROGRAMS)
        unknown = [p for p in programs if p not in PROGRAMS]
        if unknown:
            raise VtaError(f"unknown benchmark program {unknown[0]!r}; known: {', '.join(PROGRAMS)}")
        rows = sim_speed(cfg, programs, args.models.split(","))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    _print_rows(f"vtakit bench {args.what} (config {cfg.label})", rows)
    return 0


def _print_rows(title: str, rows: list[dict], keys: list[str] | None = None) -> None:
    table = Table(title=title)
    keys = keys or list(rows[0])
    for key in keys:
        table.add_column(key, justify="right")
    for row in rows:
        cells = []
        for k in keys:
            v = row[k]
            cells.append("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v))
        table.add_row(*cells)
    console.print(table)


def _bench_layers(args, cfg: HwConfig) -> int:
    from rich.progress import Progress

    from vtakit.compiler.bench import run_layer, select, summary

    layers = select(args.workload, args.what, args.layers.split(",") if args.layers else None)
    rows = []
    tuned = nullcontext()
    if args.tuning_log:
        from vtakit.scheduling.log import apply_best

        tuned = apply_best(args.tuning_log)
    with tuned, Progress(console=Console(stderr=True), transient=True, disable=args.json) as progress:
        task = progress.add_task(f"{args.what} on {args.device}", total=len(layers))
        for layer in layers:
            progress.update(task, description=f"{layer.name} on {args.device}")
            rows.append(run_layer(layer, cfg, args.device, args.vthreads))
            progress.advance(task)
    keys = ["name", "macs", "cycles", "utilization", "gops", "correct"]
    if args.device == "rtl":
        keys[3:3] = ["model_cycles", "model_error_pct"]
    if args.json:
        print(json.dumps([{k: r[k] for k in keys} for r in rows], indent=2))
        return 0 if all(r["correct"] for r in rows) else 1
    _print_rows(f"vtakit bench {args.what} --workload {args.workload} (config {cfg.label}, device "
                f"{args.device}, vthreads {args.vthreads or 'default'}"
                f"{', schedules from ' + args.tuning_log if args.tuning_log else ''})",
                rows, keys + ["repeats", "instructions", "compile_s", "run_s"])
    groups = {"all layers": rows, "layers VTA offloads": [r for r in rows if r["vta_offloads"]]}
    for label, group in groups.items():
        s = summary(group, cfg)
        if label != "all layers" and len(group) == len(rows):
            continue
        if group and s["weighted_utilization"] is not None:
            console.print(f"{label} ({', '.join(r['name'] for r in group)}): total cycles, repeats counted, "
                          f"{s['total_cycles']:,}; MAC-weighted utilization {s['weighted_utilization'] * 100:.1f} %")
    if args.device == "rtl":
        worst = max(rows, key=lambda r: abs(r["model_error_pct"]))
        console.print(f"cycle model vs RTL: largest error {worst['model_error_pct']:+.2f} % ({worst['name']}); "
                      f"model_error_pct = 100 * (model - RTL) / RTL")
    ok = all(r["correct"] for r in rows)
    console.print(f"all results match numpy: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


def cmd_compile_op(args) -> int:
    from vtakit.compiler import ops as cops
    from vtakit.compiler.runtime import pack_activation, pack_bias, pack_weight, program_image
    from vtakit.isa.asm import disasm

    cfg = _config(args.config)
    rng = np.random.default_rng(args.seed)
    n, c, h, w = _ints(args.input, 4, "--input")
    o, kh, kw = _ints(args.kernel, 3, "--kernel")
    clip = tuple(_ints(args.clip, 2, "--clip")) if args.clip else None
    shift, clip = cops._requant_args(args.op, args.shift, clip)
    op, used = cops.compile_conv2d(cfg, x_shape=(n, c, h, w), w_shape=(o, c, kh, kw), stride=args.stride,
                                   padding=args.pad, bias=args.bias, shift=shift, clip=clip,
                                   vthreads=args.vthreads, name=args.op)
    inputs = {"data": pack_activation(rng.integers(-128, 128, (n, c, h, w), dtype=np.int8), cfg.batch,
                                      cfg.block_in),
              "weight": pack_weight(rng.integers(-128, 128, (o, c, kh, kw), dtype=np.int8), cfg.block_out,
                                    cfg.block_in)}
    if args.bias:
        inputs["bias"] = pack_bias(rng.integers(-4096, 4096, o, dtype=np.int32), cfg.batch, cfg.block_out)
    image = program_image(op, inputs)
    image.save(args.output)
    console.print(f"{args.op}: {len(op.insns)} instructions, {len(op.uop_table)} micro-op words, "
                  f"schedule {used.to_dict() if hasattr(used, 'to_dict') else used}")
    console.print(f"program image -> {args.output} (run it: vtakit sim {args.output})")
    if args.asm:
        def uops_of(insn):
            start = insn.dram_base * 4
            return image.dram[start:start + insn.x_size * 4].tobytes()

        Path(args.asm).write_text(disasm(image.insn_bytes(), cfg, uop_source=uops_of))
        console.print(f"listing -> {args.asm}")
    return 0


def _ints(text: str, n: int, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise VtaError(f"{flag} takes {n} comma-separated integers, got {text!r}") from None
    if len(values) != n:
        raise VtaError(f"{flag} takes {n} comma-separated integers, got {text!r}")
    return values


# -------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vtakit", description="VTA-style accelerator workbench")
    sub = p.add_subparsers(dest="command", required=True)
    config_help = "preset name or JSON file (default pynq)"

    c = sub.add_parser("config", help="show a configuration or list the presets")
    c.add_argument("name", nargs="?", help=config_help)
    c.add_argument("--json", action="store_true", help="print vtakit's JSON format")
    c.add_argument("--list", action="store_true", help="list the presets")
    c.set_defaults(func=cmd_config)

    a = sub.add_parser("asm", help="assemble a listing into 16-byte instruction words")
    a.add_argument("source")
    a.add_argument("-o", "--output", help="output file (default: SOURCE with .bin)")
    a.add_argument("--config", help=config_help)
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser("disasm", help="list the instructions of a .bin or program image .npz")
    d.add_argument("program")
    d.add_argument("--config", help=config_help + "; images carry their own")
    d.add_argument("--uops", action="store_true", help="also list the micro-ops each LOAD.UOP loads")
    d.set_defaults(func=cmd_disasm)

    s = sub.add_parser("sim", help="run a program image (.npz) on a simulator")
    s.add_argument("program")
    s.add_argument("--model", default="cycle", choices=["cycle", "functional", "sim", "fsim", "rtl"],
                   help="rtl: the Verilator-built RTL (its --trace is a waveform: .vcd or .fst)")
    s.add_argument("--config", help="check the image was built for this configuration")
    s.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here (rtl: a VCD/FST waveform)")
    s.add_argument("--json", action="store_true", help="print the statistics as JSON")
    s.add_argument("-o", "--output", help="write the final DRAM to this .npz")
    s.add_argument("--timeout", type=float, help="give up after this many seconds")
    s.set_defaults(func=cmd_sim)

    m = sub.add_parser("demo", help="compile ResNet-18 and run it on the cycle model (or one layer: --layer)")
    m.add_argument("--config", help=config_help)
    m.add_argument("--layer", help="only this ResNet-18 layer (C1..C11), with a Chrome trace")
    m.add_argument("--trace", default="out/demo_trace.json", help="with --layer: the trace file")
    m.add_argument("--samples", type=int, default=4, help="calibration images (seeded random)")
    m.add_argument("--roofline", default="out/resnet18_roofline.png")
    m.set_defaults(func=cmd_demo)

    from vtakit import cli_hw, cli_net, cli_tune

    b = sub.add_parser("bench", help="measure and print figures")
    b.add_argument("what", choices=["conv2d", "dense", "sim", "isa", "tuner"])
    b.add_argument("--config", help=config_help)
    b.add_argument("--workload", default="resnet18", help="conv2d/dense: layer table (resnet18)")
    b.add_argument("--layers", help="conv2d/dense: comma-separated layer names (default all)")
    b.add_argument("--device", default="sim",
                   help="conv2d/dense: sim (cycle), fsim (functional) or rtl (also reports the cycle model's error)")
    b.add_argument("--vthreads", type=int, help="conv2d/dense: force this many virtual threads")
    b.add_argument("--programs", help="sim: comma-separated benchmark programs")
    b.add_argument("--models", default="functional,cycle", help="sim: comma-separated models")
    b.add_argument("--count", type=int, default=100_000, help="isa: instructions")
    b.add_argument("--json", action="store_true")
    b.add_argument("--tuning-log", help="conv2d/dense: use the best schedules of this tuning log")
    cli_tune.add_bench_options(b)
    b.set_defaults(func=cmd_bench)

    co = sub.add_parser("compile-op", help="compile an operator and dump its program image and listing")
    co.add_argument("op", choices=["conv2d"])
    co.add_argument("--input", required=True, help="N,C,H,W of the data")
    co.add_argument("--kernel", required=True, help="O,KH,KW of the weights")
    co.add_argument("--stride", type=int, default=1)
    co.add_argument("--pad", type=int, default=0)
    co.add_argument("--bias", action="store_true")
    co.add_argument("--shift", type=int)
    co.add_argument("--clip", help="lo,hi")
    co.add_argument("--vthreads", type=int)
    co.add_argument("--config", help=config_help)
    co.add_argument("--seed", type=int, default=0, help="seed of the random data placed in the image")
    co.add_argument("-o", "--output", default="op.npz", help="program image (.npz)")
    co.add_argument("--asm", help="also write the listing here")
    co.set_defaults(func=cmd_compile_op)

    cli_hw.add_parsers(sub, config_help)
    from vtakit import cli_fpga

    cli_fpga.add_parsers(sub, config_help)
    cli_net.add_parsers(sub, config_help)
    cli_tune.add_parsers(sub, config_help)
    from vtakit import cli_explore

    cli_explore.add_parsers(sub, config_help)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except VtaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
