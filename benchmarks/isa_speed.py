"""Encoding speed: random instructions (100,000 by default) through encode_program and decode_program.

    python benchmarks/isa_speed.py [--count N] [--config 1x32] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from vtakit.errors import VtaError
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import decode_program, encode_program
from vtakit.isa.random_instructions import random_instructions


def isa_speed(cfg: HwConfig, n: int = 100_000) -> dict:
    """Seconds to encode and to decode `n` random instructions, and whether they came back equal."""
    insns = random_instructions(cfg, n)
    t0 = time.perf_counter()
    code = encode_program(insns, cfg)
    t1 = time.perf_counter()
    back = decode_program(code, cfg)
    t2 = time.perf_counter()
    return {"instructions": n, "encode_s": round(t1 - t0, 3), "decode_s": round(t2 - t1, 3),
            "round_trip": back == insns}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="instruction encode/decode speed")
    ap.add_argument("--config", help="preset name or config JSON (default pynq)")
    ap.add_argument("--count", type=int, default=100_000, help="instructions")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.count < 1:
        ap.error(f"--count must be >= 1, got {args.count}")
    try:
        cfg = HwConfig.load(args.config)
    except VtaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    row = isa_speed(cfg, args.count)
    if args.json:
        print(json.dumps([row], indent=2))
    else:
        print(f"{row['instructions']:,} instructions (config {cfg.label}): encode {row['encode_s']:.3f} s, "
              f"decode {row['decode_s']:.3f} s, round trip {'exact' if row['round_trip'] else 'DIFFERS'}")
    return 0 if row["round_trip"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
