"""What every command module of the CLI shares: the console, configuration loading, option parsing
and tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vtakit.errors import VtaError, needs_full_install
from vtakit.isa.config import DEFAULT_PRESET, HwConfig

# Tables stay readable when the output goes to a file or a CI log.
console = Console(width=None if sys.stdout.isatty() else 140)
# Progress bars go to stderr so that --json output on stdout stays clean.
progress_console = Console(stderr=True)

CONFIG_HELP = f"preset name or JSON file (default {DEFAULT_PRESET})"


def load_config(spec: str | None) -> HwConfig:
    """The HwConfig a --config option names (the default preset when it names none)."""
    return HwConfig.load(spec or DEFAULT_PRESET)


def require_full_install(missing: str, what: str) -> None:
    """A PC-side command (compile, tune, explore, the RTL) on a board's runtime, where `missing` (a PC-side
    package its module could not import) is absent: one error line instead of a traceback."""
    if missing:
        raise needs_full_install(what, missing)


def parse_ints(text: str, count: int, flag: str) -> list[int]:
    """`count` comma-separated integers of option `flag` (one-line VtaError otherwise)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise VtaError(f"{flag} takes {count} comma-separated integers, got {text!r}") from None
    if len(values) != count:
        raise VtaError(f"{flag} takes {count} comma-separated integers, got {text!r}")
    return values


def print_rows(title: str, rows: list[dict], keys: list[str] | None = None) -> None:
    """A table of dict rows (floats to three decimals, None as '-')."""
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


def png_path(text: str) -> str:
    """A --plot argument: a path ending in .png that is not a folder or a device (matplotlib would
    otherwise write PATH.png beside it, or fail on the format)."""
    path = Path(text)
    if path.suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(f"{text[:200]!r} must end in .png")
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text[:200]!r} is not a regular file")
    return text


class DeprecatedAlias(argparse.Action):
    """An old option spelling that still works for one release, with a warning on stderr."""

    def __init__(self, option_strings, dest, new: str = "", **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"warning: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)
