"""Encoding speed: 100k random instructions through encode_program and decode_program.

Same as `vtakit bench isa`; extra arguments are passed through (--count, --config, --json).
"""

import sys

from vtakit.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "isa", *sys.argv[1:]]))
