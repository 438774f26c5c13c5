"""The FPGA commands of the `vtakit` command line: `fpga boards|project|sim-overlay|check`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.table import Table

from vtakit.cli._common import CONFIG_HELP, console, load_config
from vtakit.errors import VtaError
from vtakit.fpga.driver import PynqDevice
from vtakit.fpga.overlay import overlay_config, overlay_files, read_sidecar
from vtakit.fpga.project import write_project
from vtakit.fpga.project_checks import check_project
from vtakit.fpga.selftest import board_check
from vtakit.hw.boards import BOARDS, board, board_for


def _board_and_config(args):
    """The board preset and HwConfig the options name (the board's preset config by default)."""
    cfg = load_config(args.config) if args.config else None
    preset = board(args.board) if args.board else board_for(cfg or load_config(None))
    return preset, cfg or preset.config


def cmd_fpga(args) -> int:
    if args.fpga_cmd == "boards":
        table = Table(title="vtakit board presets")
        for col in ("board", "part", "PS", "config", "clock MHz", "bus bits", "registers", "memory port"):
            table.add_column(col)
        for b in BOARDS.values():
            table.add_row(b.name, b.part, b.ps, b.config_preset, f"{b.clock_mhz:g}", str(b.bus_bits),
                          f"{b.register_base:#010x}", b.mem_ports[0])
        console.print(table)
        return 0
    preset, cfg = _board_and_config(args)
    if args.fpga_cmd == "sim-overlay":
        from vtakit.fpga.simboard import write_sim_overlay  # lazy: pynq (the simulated board is a pynq.Device)

        bit = write_sim_overlay(args.output, preset, cfg, args.flavour)
        console.print(f"simulated overlay for {cfg.label} on the {preset.title} ({args.flavour} registers): {bit} "
                      f"and {bit.with_suffix('.hwh').name}; run it with `vtakit fpga check --sim --overlay {bit}`")
        return 0

    project = write_project(preset, cfg, args.output)
    console.print(f"Vivado project for {cfg.label} on the {preset.title} ({preset.part}, {cfg.clock_mhz:g} MHz, "
                  f"{cfg.bus_bytes * 8}-bit {preset.mem_ports[0]}) -> {project.directory}")
    console.print(f"  {len(project.rtl)} RTL files, build.tcl, Makefile, README.md, overlay/{project.sidecar.name}")
    if args.check:
        t0 = time.perf_counter()
        problems = check_project(project, yosys=not args.no_yosys)
        if problems:
            for p in problems:
                console.print(f"[red]problem:[/] {p}")
            return 1
        console.print(f"checks passed in {time.perf_counter() - t0:.1f} s: Tcl dry run, ports of vta_top against "
                      f"the block design" + ("" if args.no_yosys else ", Yosys elaboration of rtl/"))
    console.print(f"next: cd {project.directory} && make   (Vivado; not run by vtakit), "
                  f"then make deploy BOARD=user@host")
    return 0


def _overlay_board_and_config(args):
    """Board and config for `fpga check`: the options, else what the overlay says it was built for."""
    built, built_board = None, None
    if args.overlay:
        files = overlay_files(args.overlay)
        built = overlay_config(files)[0]
        built_board = read_sidecar(files.sidecar).get("board") if files.sidecar else None
    name = args.board or built_board
    cfg = load_config(args.config) if args.config else built or (board(name).config if name else None)
    cfg = cfg or load_config(None)
    return (board(name) if name else board_for(cfg)), cfg


def cmd_check(args) -> int:
    preset, cfg = _overlay_board_and_config(args)

    if args.programs < 0:  # before a board or the RTL is set up
        raise VtaError(f"--programs must be 0 or more, got {args.programs}")
    t0 = time.perf_counter()
    if args.sim:
        from vtakit.fpga.simboard import SimBoard, simulated_pynq  # lazy: pynq (the simulated board needs it)

        device = (PynqDevice(cfg, args.overlay, board=preset, device=SimBoard(preset)) if args.overlay
                  else simulated_pynq(cfg, preset, flavour=args.flavour))
    else:   # the board: its part is checked when named (or when the overlay's .json names it)
        device = PynqDevice(cfg, args.overlay, board=preset if args.board or args.overlay else None)
    rows = board_check(device, programs=args.programs, seed=args.seed)
    ok = all(r.ok for r in rows)
    where = f"simulated {preset.title}" if args.sim else "the board"
    if args.json:
        print(json.dumps({"ok": ok, "device": where, "config": cfg.label,
                          "overlay": str(device.overlay.bitfile_name), "rows": [r.to_dict() for r in rows]}, indent=2))
        return 0 if ok else 1
    table = Table(title=f"vtakit fpga check: {cfg.label} on {where} ({Path(device.overlay.bitfile_name).name})")
    for col in ("check", "result", "cycles", "seconds", "detail"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name, "[green]ok[/]" if r.ok else "[red]FAILED[/]", f"{r.cycles:,}" if r.cycles else "",
                      f"{r.seconds:.2f}", r.detail)
    console.print(table)
    console.print(("[green]board check passed[/]" if ok else "[red]board check failed[/]")
                  + f" in {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


def register(sub) -> None:
    f = sub.add_parser("fpga", help="PYNQ boards: presets, Vivado projects, simulated overlays, the board self-test")
    fsub = f.add_subparsers(dest="fpga_cmd", required=True)
    fsub.add_parser("boards", help="list the board presets").set_defaults(func=cmd_fpga)
    p = fsub.add_parser("project", help="write the Vivado project that builds the overlay (.bit + .hwh)")
    s = fsub.add_parser("sim-overlay", help="write a simulated overlay (.bit + .hwh) for the simulated board")
    for q in (p, s):
        q.add_argument("--board", help="pynq-z1, pynq-z2, ultra96-v2, zcu104 (default: the config's)")
        q.add_argument("--config", help=CONFIG_HELP + " (default: the board's preset)")
        q.add_argument("-o", "--output", required=True, help="output folder")
        q.set_defaults(func=cmd_fpga)
    p.add_argument("--check", action="store_true", help="verify the generated files (Tcl dry run, ports, Yosys)")
    p.add_argument("--no-yosys", action="store_true", help="with --check: skip the Yosys elaboration")
    s.add_argument("--flavour", choices=["vtakit", "vta-hls"], default="vtakit",
                   help="this project's register IP, or VTA's four HLS IPs")

    c = fsub.add_parser("check", help="self-test of the accelerator on a PYNQ board (or the simulated one): "
                                      "registers, random programs and a conv layer vs the functional model")
    c.add_argument("--overlay", help=".bit of the overlay (default: $VTAKIT_OVERLAY or ~/.vtakit/overlays)")
    c.add_argument("--board", help="board preset (checks the bitstream's part)")
    c.add_argument("--config", help=CONFIG_HELP + " (default: the overlay's)")
    c.add_argument("--sim", action="store_true", help="on the simulated board (the RTL under Verilator)")
    c.add_argument("--flavour", choices=["vtakit", "vta-hls"], default="vtakit",
                   help="--sim without --overlay: which register map the simulated overlay has")
    c.add_argument("--programs", type=int, default=8, help="random programs to compare")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_check)
