"""The ISA and simulator commands: `config`, `asm`, `disasm`, `sim`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from vtakit.cli._common import CONFIG_HELP, DeprecatedAlias, console, load_config
from vtakit.errors import VtaError
from vtakit.isa.config import PRESETS

SIM_DEVICES = ["cycle", "functional", "sim", "fsim", "rtl"]


def cmd_config(args) -> int:
    from vtakit.report import config_table, presets_table

    from vtakit.hw.gen import SUPPORTED_BUS_BYTES

    buses = " and ".join(f"{b * 8}-bit" for b in SUPPORTED_BUS_BYTES)
    if args.list:
        console.print(presets_table(PRESETS))
        console.print(f"The RTL (vtakit hw) builds {buses} memory buses; the simulators take any width.")
        return 0
    cfg = load_config(args.name)
    if args.json:
        print(cfg.to_json(), end="")
    else:
        console.print(config_table(cfg))
        console.print(rtl_support(cfg))
    return 0


def rtl_support(cfg) -> str:
    """Whether the RTL builds `cfg`: it implements some memory-bus widths only (hw.gen)."""
    from vtakit.errors import RtlError
    from vtakit.hw.gen import check_supported

    try:
        check_supported(cfg)
    except RtlError as e:
        return f"RTL: not built: {e} (the simulators and the compiler take it)"
    return f"RTL: builds ({cfg.bus_bytes * 8}-bit memory bus)"


def cmd_asm(args) -> int:
    from vtakit.isa.asm import asm
    from vtakit.isa.encoding import encode_program

    cfg = load_config(args.config)
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
    from vtakit.isa.image import ProgramImage

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
    sys.stdout.write(disasm(code, load_config(args.config)))
    return 0


def cmd_sim(args) -> int:
    from vtakit.isa.image import ProgramImage
    from vtakit.report import stats_tables
    from vtakit.sim import run_image

    image = ProgramImage.load(args.program)
    if args.config and load_config(args.config) != image.config:
        raise VtaError(f"{args.program} was built for config {image.config.label}, not {args.config}")
    stats, dram = run_image(image, model=args.device, trace=args.trace, timeout_s=args.timeout)
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
        viewer = "GTKWave or Surfer" if args.device == "rtl" else "https://ui.perfetto.dev"
        console.print(f"trace written to {stats.trace_path} (open in {viewer})")
    if args.output:
        console.print(f"final DRAM written to {args.output}")
    return 0


def register(sub) -> None:
    c = sub.add_parser("config", help="show a configuration or list the presets")
    c.add_argument("name", nargs="?", help=CONFIG_HELP)
    c.add_argument("--json", action="store_true", help="print vtakit's JSON format")
    c.add_argument("--list", action="store_true", help="list the presets")
    c.set_defaults(func=cmd_config)

    a = sub.add_parser("asm", help="assemble a listing into 16-byte instruction words")
    a.add_argument("source")
    a.add_argument("-o", "--output", help="output file (default: SOURCE with .bin)")
    a.add_argument("--config", help=CONFIG_HELP)
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser("disasm", help="list the instructions of a .bin or program image .npz")
    d.add_argument("program")
    d.add_argument("--config", help=CONFIG_HELP + "; images carry their own")
    d.add_argument("--uops", action="store_true", help="also list the micro-ops each LOAD.UOP loads")
    d.set_defaults(func=cmd_disasm)

    s = sub.add_parser("sim", help="run a program image (.npz) on a simulator")
    s.add_argument("program")
    s.add_argument("--device", default="cycle", choices=SIM_DEVICES,
                   help="rtl: the Verilator-built RTL (its --trace is a waveform: .vcd or .fst)")
    s.add_argument("--model", dest="device", choices=SIM_DEVICES, action=DeprecatedAlias, new="--device",
                   help="deprecated spelling of --device")
    s.add_argument("--config", help="check the image was built for this configuration")
    s.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here (rtl: a VCD/FST waveform)")
    s.add_argument("--json", action="store_true", help="print the statistics as JSON")
    s.add_argument("-o", "--output", help="write the final DRAM to this .npz")
    s.add_argument("--timeout", type=float, help="give up after this many seconds")
    s.set_defaults(func=cmd_sim)
