"""Simulator speed: GEMM micro-ops per second on the functional and cycle models.

Runs a ~2 M micro-op convolution-shaped program and a ResNet-18-sized stream
(~7 M micro-ops) and prints one row per (program, model).  Same as
`vtakit bench sim`; extra arguments are passed through (e.g. --config 1x32, --json).
"""

import sys

from vtakit.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", "sim", *sys.argv[1:]]))
