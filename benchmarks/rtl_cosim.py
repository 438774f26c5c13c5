"""The RTL against the cycle model: ResNet-18 C2-C11 on the Verilator-built RTL, each
checked against numpy, with the cycle model's cycles and its error beside the RTL's.

Same as `vtakit bench conv2d --device rtl --layers C2,...,C11`; extra arguments are
passed through (e.g. --config 1x8, --json).  The simulator-speed figure of the RTL
comes from `python benchmarks/sim_speed.py --models cycle,rtl`.
"""

import sys

from vtakit.cli import main

LAYERS = ",".join(f"C{k}" for k in range(2, 12))

if __name__ == "__main__":
    raise SystemExit(main(["bench", "conv2d", "--device", "rtl", "--layers", LAYERS, *sys.argv[1:]]))
