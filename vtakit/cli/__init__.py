"""The `vtakit` command line (also `python -m vtakit`).

Each command module under `vtakit/cli/` has `register(subparsers)` and its
`cmd_*` functions; adding a command is one module plus one entry in
`COMMAND_MODULES`.  Errors a user can cause arrive as one `error: ...` line on
stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from vtakit.errors import VtaError

# In the order `vtakit --help` lists them.
COMMAND_MODULES = (
    "tools",          # config, asm, disasm, sim
    "demo",           # demo
    "benchmark",      # bench conv2d|dense|sim|isa|tuner
    "compile_op",     # compile-op
    "hardware",       # hw gen|build|synth, cosim
    "fpga_board",     # fpga boards|project|sim-overlay, board check
    "network",        # compile, run, report
    "tuning",         # tune
    "exploration",    # explore
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vtakit", description="VTA-style accelerator workbench")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"vtakit.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except VtaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
