"""The hardware commands of the `vtakit` command line: `hw gen|build|synth|pnr|cosim`, each a subcommand
with only its own options."""

from __future__ import annotations

import json
import time

from rich.table import Table

from vtakit.cli._common import CONFIG_HELP, console, load_config, require_full_install
from vtakit.errors import VtaError, pc_side_missing
from vtakit.hw.build import build
from vtakit.hw.cosim import cosim
from vtakit.hw.gen import generate
from vtakit.hw.pnr import pnr
from vtakit.hw.synth import PARTS, synth
from vtakit.isa.image import ProgramImage

_MISSING = ""  # a PC-side package this command needs and a board's runtime lacks (errors.PC_SIDE)
try:
    from vtakit.hw.timing import NET_DELAY_NS, XCUP_SCALE, timing
except ImportError as missing:  # a board's runtime has no Yosys: `hw synth` says it needs the full install
    _MISSING = pc_side_missing(missing)


def cmd_gen(args) -> int:
    cfg = load_config(args.config)
    files = generate(cfg, args.output)
    console.print(f"config {cfg.label}: {len(files)} files -> {args.output} "
                  f"(vta_pkg.sv generated, top module vta_top)")
    return 0


def cmd_build(args) -> int:
    cfg = load_config(args.config)
    t0 = time.perf_counter()
    lib = build(cfg, trace=args.trace)
    console.print(f"config {cfg.label}: Verilator model (lint -Wall clean) at {lib} "
                  f"({time.perf_counter() - t0:.1f} s, cached by sources and config)")
    return 0


def cmd_synth(args) -> int:
    require_full_install(_MISSING, "vtakit hw synth")
    cfg = load_config(args.config)
    with console.status(f"Yosys synth_xilinx of {cfg.label} (minutes on first run, cached after)"):
        result = synth(cfg, args.part)
    est = None
    if not args.no_timing:
        with console.status(f"static timing of {cfg.label} (an xc7 synthesis if not cached)"):
            est = timing(cfg, args.part)
    if args.json:
        out = {k: getattr(result, k) for k in ("lut", "ff", "bram36", "dsp", "fits")} \
            | {"config": result.config, "part": result.part}
        if est is not None:
            out["timing"] = est.to_dict()
        print(json.dumps(out, indent=2))
        return 0

    part = PARTS[result.part]
    table = Table(title=f"vtakit hw synth: config {cfg.label} on {part.name} (Yosys synth_xilinx)")
    for col in ("resource", "used", "available", "%"):
        table.add_column(col, justify="right")
    for key, label in (("lut", "LUT"), ("ff", "FF"), ("bram36", "BRAM36"), ("dsp", "DSP48")):
        used, avail = getattr(result, key), getattr(part, key)
        table.add_row(label, f"{used:g}", f"{avail:,}", f"{100 * used / avail:.1f}")
    console.print(table)
    verdict = "[green]fits[/]" if result.fits else f"[red]does not fit[/] ({', '.join(result.over)})"
    console.print(f"{verdict}; Yosys ran {result.seconds:.0f} s")
    if est is not None:
        _print_timing(est)
    return 0


def _print_timing(est) -> None:
    basis = "7-series -1 cell delays" if est.scale == 1.0 else f"7-series -1 cell delays x {XCUP_SCALE}"
    console.print(f"timing ({basis}, hw/timing.py): logic delay {est.logic_ns:.2f} ns over {est.levels} levels, "
                  f"{est.start} -> {est.end}")
    colour = "green" if est.meets else "red"
    console.print(f"routed estimate ({NET_DELAY_NS} ns per net) {est.routed_ns:.2f} ns: fmax ~{est.fmax_mhz:.0f} MHz; "
                  f"at {est.clock_mhz:g} MHz slack [{colour}]{est.slack_ns:+.2f} ns[/] "
                  f"({est.routed_start} -> {est.routed_end})")


def cmd_pnr(args) -> int:
    cfg = load_config(args.config)
    with console.status(f"Yosys synth_ecp5 + nextpnr-ecp5 of {cfg.label} (tens of minutes on first run, cached after)"):
        r = pnr(cfg)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return 0
    colour = "green" if r.fmax_mhz >= r.clock_mhz else "red"
    console.print(f"config {cfg.label} on the {r.device} (nextpnr-ecp5, out of context, a Lattice part: a second "
                  f"opinion, not a Xilinx figure): post-route fmax [{colour}]{r.fmax_mhz:.1f} MHz[/] "
                  f"(asked {r.clock_mhz:g}); critical path {r.critical_ns:.2f} ns = {r.logic_ns:.2f} logic + "
                  f"{r.routing_ns:.2f} routing; Yosys {r.synth_s:.0f} s, nextpnr {r.pnr_s:.0f} s")
    console.print("used: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r.cells.items())))
    return 0


def cmd_cosim(args) -> int:
    image = ProgramImage.load(args.program)
    if args.config and load_config(args.config) != image.config:
        raise VtaError(f"{args.program} was built for config {image.config.label}, not {args.config}")
    report = cosim(image, timeout_s=args.timeout)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0 if report.agree else 1
    table = Table(title=f"vtakit hw cosim {args.program} (config {report.config})")
    for col in ("model", "cycles", "wall s", "result"):
        table.add_column(col, justify="right")
    for run in report.runs:
        table.add_row(run.model, "-" if run.cycles is None else f"{run.cycles:,}",
                      "-" if run.wall_s is None else f"{run.wall_s:.3f}", run.error or "ran to FINISH")
    console.print(table)
    if report.cycle_error is not None:
        console.print(f"cycle model vs RTL: {report.cycle_error * 100:+.2f} % cycles")
    for m in report.mismatches:
        where = (f"instruction {m.insn_index} (STORE) from {m.buffer} buffer entry {m.element}, lane {m.lane}"
                 if m.insn_index is not None else "a byte no STORE wrote")
        region = f", {m.region}" if m.region else ""
        console.print(f"[red]MISMATCH[/] {m.model}: first at DRAM byte {m.byte:#x}{region}: {where}: expected "
                      f"{m.expected}, got {m.got} ({m.differing_bytes} bytes differ)")
    if report.agree:
        console.print("[green]bit-exact[/]: every model ran to FINISH with the same DRAM")
    return 0 if report.agree else 1


def register(sub) -> None:
    h = sub.add_parser("hw", help="the RTL: generate, build with Verilator, synthesize with Yosys, place and "
                                  "route on an ECP5 with nextpnr, co-simulate against the models")
    hsub = h.add_subparsers(dest="hw_cmd", required=True)
    g = hsub.add_parser("gen", help="write the RTL sources with the config's generated package vta_pkg.sv")
    g.add_argument("--config", help=CONFIG_HELP)
    g.add_argument("-o", "--output", required=True, help="output folder")
    g.set_defaults(func=cmd_gen)

    b = hsub.add_parser("build", help="build the RTL into a Verilator model (cached by sources and config)")
    b.add_argument("--config", help=CONFIG_HELP)
    b.add_argument("--trace", choices=["fst", "vcd"], help="a model that can write waveforms")
    b.set_defaults(func=cmd_build)

    s = hsub.add_parser("synth", help="Yosys synth_xilinx: resources against the part, and a static timing estimate")
    s.add_argument("--config", help=CONFIG_HELP)
    s.add_argument("--part", help="Xilinx part (default: the config's board)")
    s.add_argument("--json", action="store_true", help="print lut, ff, bram36, dsp, fits (and timing) as JSON")
    s.add_argument("--no-timing", action="store_true", help="resources only, no static timing estimate")
    s.set_defaults(func=cmd_synth)

    p = hsub.add_parser("pnr", help="Yosys synth_ecp5 + nextpnr-ecp5: a post-route fmax on a Lattice part "
                                    "(a second opinion on timing)")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_pnr)

    c = hsub.add_parser("cosim", help="run a program image on the functional model, the cycle model and the RTL")
    c.add_argument("program")
    c.add_argument("--config", help="check the image was built for this configuration")
    c.add_argument("--timeout", type=float, help="give up on a model after this many seconds")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_cosim)
