"""The `vtakit` command line (also `python -m vtakit`).

Each command module under `vtakit/cli/` has `register(subparsers)` and its
`cmd_*` functions; adding a command is one module plus its entry in `COMMANDS`
(and the import line above it).  Errors a user can cause arrive as one `error: ...` line on
stderr and exit status 1.  Anything else is a bug in vtakit: it too is one line
(exit status 2), and VTAKIT_DEBUG=1 shows its traceback.  Usage errors exit with
status 2, as argparse's do; a command spelled as before it moved into its group
(MOVED) is one of them, one line that names its new spelling.  Command modules import
what they use at their top, as every module does; only an optional dependency (pynq
for the simulated board) is imported inside the command that needs it.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from vtakit.cli import benchmark, compile_op, demo, exploration, fpga_board, hardware, network, tools, tuning
from vtakit.errors import VtaError, one_line

# In the order `vtakit --help` lists them.
COMMANDS = (
    tools,            # config, asm, disasm, sim
    demo,             # demo
    benchmark,        # bench conv2d|dense|sim|isa|tuner
    compile_op,       # compile-op
    hardware,         # hw gen|build|synth|pnr|cosim
    fpga_board,       # fpga boards|project|sim-overlay|check
    network,          # compile, run, report
    tuning,           # tune
    exploration,      # explore
)
COMMAND_MODULES = tuple(module.__name__.rsplit(".", 1)[-1] for module in COMMANDS)


MOVED = {"cosim": ("cosim", "hw cosim"), "board": ("board check", "fpga check")}
"""Commands that moved into their noun's group: first word -> (old spelling, new one).  argparse's own
error would only list the commands, so main() names the new spelling."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vtakit", description="VTA-style accelerator workbench")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings reach a CLI user as one `warning: ...` line, not Python's two-line form with a source line."""
    print(f"warning: {one_line(str(message))}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in MOVED:
        old, new = MOVED[argv[0]]
        print(f"error: `vtakit {old}` is now `vtakit {new}` (same options)", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    warnings.showwarning = _warning_line
    try:
        return args.func(args)
    except VtaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"error: out of memory in vtakit {args.command}", file=sys.stderr)
        return 1
    except OSError as e:  # the file system said no (a path that is a file, a device, /proc): not a bug
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {one_line(where + (e.strerror or str(e)), 300)}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug, not bad input: still one line for the user, the traceback on request
        if os.environ.get("VTAKIT_DEBUG"):
            raise
        print(f"error: internal error in vtakit {args.command} ({type(e).__name__}: {one_line(str(e), 200)}); "
              "this is a bug in vtakit, set VTAKIT_DEBUG=1 for the traceback", file=sys.stderr)
        return 2
