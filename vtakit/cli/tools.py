"""The ISA and simulator commands: `config`, `asm`, `disasm`, `sim`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from vtakit.cli._common import CONFIG_HELP, DeprecatedAlias, console, load_config
from vtakit.errors import IsaError, RtlError, VtaError
from vtakit.files import make_parent, read_limited
from vtakit.hw.gen import SUPPORTED_BUS_BYTES, check_supported
from vtakit.isa.asm import asm, disasm
from vtakit.isa.config import PRESETS
from vtakit.isa.encoding import encode_program
from vtakit.isa.fields import INSN_BYTES
from vtakit.isa.image import MAX_IMAGE_BYTES, ProgramImage
from vtakit.sim import run_image
from vtakit.tables import config_table, presets_table, stats_tables

MAX_TEXT_BYTES = 256 << 20
"""An assembly source may hold at most this (256 MiB, some 10 M instructions)."""

SIM_DEVICES = ["cycle", "functional", "sim", "fsim", "rtl"]


def cmd_config(args) -> int:

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
    try:
        check_supported(cfg)
    except RtlError as e:
        return f"RTL: not built: {e} (the simulators and the compiler take it)"
    return f"RTL: builds ({cfg.bus_bytes * 8}-bit memory bus)"


def cmd_asm(args) -> int:
    cfg = load_config(args.config)
    source = Path(args.source)
    text = read_limited(source, "assembly source", MAX_TEXT_BYTES)  # asm decodes each line: bad bytes name it
    code = encode_program(asm(text, cfg), cfg)
    out = output_path(args.output) if args.output else source.with_suffix(".bin")
    try:
        out.write_bytes(code)
    except OSError as e:
        raise VtaError(f"cannot write {out}: {e.strerror}") from None
    console.print(f"{len(code) // 16} instructions -> {out}")
    return 0


DISASM_CHUNK = 1 << 16
"""Instructions decoded and written at a time: a listing of millions of instructions is
streamed, so memory stays bounded by the chunk, not by the program."""


def cmd_disasm(args) -> int:
    path = Path(args.program)
    if path.suffix == ".npz":
        image = ProgramImage.load(path)
        end = image.insn_addr + image.insn_count * INSN_BYTES
        if image.insn_addr < 0 or image.insn_count < 0 or end > image.dram.size:
            raise VtaError(f"{path}: its {image.insn_count} instructions at byte {image.insn_addr:#x} reach past "
                           f"the end of its {image.dram.size:#x}-byte DRAM image")

        def uops_of(insn):
            start = insn.dram_base * 4
            stop = start + insn.x_size * 4 * max(insn.y_size, 1)
            if stop > image.dram.size:
                raise VtaError(f"{path}: the micro-ops of a LOAD.UOP at element {insn.dram_base} reach past the "
                               f"end of the {image.dram.size:#x}-byte DRAM image")
            return image.dram[start:stop].tobytes()

        _write_listing(image.dram[image.insn_addr:end], image.config, uops_of if args.uops else None)
        return 0
    if args.uops:
        raise VtaError("--uops needs a program image (.npz) that holds the micro-ops")
    code = np.frombuffer(read_limited(path, "program file", MAX_IMAGE_BYTES), np.uint8)
    if code.size % INSN_BYTES:
        raise VtaError(f"{path}: {code.size} bytes is not a whole number of {INSN_BYTES}-byte instructions "
                       f"({code.size % INSN_BYTES} bytes left over)")
    _write_listing(code, load_config(args.config), None)
    return 0


def _write_listing(code: np.ndarray, cfg, uop_source) -> None:
    """disasm's listing of `code`, decoded and written DISASM_CHUNK instructions at a time."""
    n = code.size // INSN_BYTES
    sys.stdout.write(f"; vtakit listing  config={cfg.label}  instructions={n}\n")
    for start in range(0, n, DISASM_CHUNK):
        chunk = code[start * INSN_BYTES:(start + DISASM_CHUNK) * INSN_BYTES]
        try:
            text = disasm(chunk, cfg, start=start, header=False, uop_source=uop_source)
        except IsaError as e:  # its index counts from the chunk's first instruction
            if e.insn_index is None or not start:
                raise
            raise IsaError(getattr(e, "detail", str(e)), field=e.field, insn_index=e.insn_index + start) from None
        sys.stdout.write(text)


def cmd_sim(args) -> int:
    image = ProgramImage.load(args.program)
    if args.config and load_config(args.config) != image.config:
        raise VtaError(f"{args.program} was built for config {image.config.label}, not {args.config}")
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        raise VtaError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    trace = output_path(args.trace) if args.trace else None
    output = output_path(args.output) if args.output else None
    stats, dram = run_image(image, model=args.device, trace=trace, timeout_s=args.timeout)
    if output is not None:
        try:
            np.savez_compressed(output, dram=dram)
        except OSError as e:
            raise VtaError(f"cannot write {output}: {e.strerror}") from None
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


def output_path(text: str) -> Path:
    """An output file's path with its parent folders created, as every writer here does."""
    return make_parent(text, "output file")


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
    s.add_argument("--timeout", type=float,
                   help="give up after this many seconds; without it, a program with more work than "
                        "the default budget (vtakit.sim.budget.MAX_WORK micro-ops) is refused before it runs")
    s.set_defaults(func=cmd_sim)
