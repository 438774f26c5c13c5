"""int8 on the accelerator vs float onnxruntime on a real pretrained text detector and real scans.

    .venv/bin/python benchmarks/ocr_real.py [--config pynq] [--size 320] [--device sim|cpu] [--range-scale on|off]
        [--wide-residual on|off]

The network: PP-OCRv4's text detector (a DBNet with a PP-LCNetV3 backbone: hardswish and a learned
affine on the host before its depthwise convs) from RapidOCR's `rapidocr-onnxruntime` wheel (`make
install` installs it without its dependencies; the script says so when it is absent).  Calibration: 8
pages rendered with matplotlib (tests/support/documents.py); test: 8 views of scikit-image's `page`
scan.  Printed per view and on average: the cosine of the text probability maps, and
the IoU of the text pixels (probability > 0.3, DBNet's threshold), int8 against float; then the
accelerator cycles of one inference.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from real_accuracy import _support

def main(argv: list[str] | None = None) -> int:
    from vtakit.compiler.graph import compile_module
    from vtakit.compiler.graph.report import calibration_lines

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--size", type=int, default=320, help="input side (a multiple of 32)")
    ap.add_argument("--device", default="sim", help="sim (cycle model; the first view, the rest on cpu) or cpu")
    ap.add_argument("--range-scale", default="on", choices=("on", "off"))
    ap.add_argument("--wide-residual", default="off", choices=("on", "off"))
    ap.add_argument("--equalize", default=None, help="compile_module's equalize: off, exact or clip-as-relu")
    ap.add_argument("--calibration", default=None, help="compile_module's calibration method")
    args = ap.parse_args(argv)
    real, docs = _support("real_models"), _support("documents")
    try:
        model = real.ppocr_det_model(args.size)
    except real.ModelMissing as e:
        print(f"skipped: {e}")
        return 0
    import onnxruntime as ort

    cal = [real.ppocr_preprocess(p)[None] for p in docs.calibration_pages(8, args.size)]
    views = docs.test_scans(args.size)
    t0 = time.perf_counter()
    options = {k: v for k, v in (("equalize", args.equalize), ("calibration", args.calibration)) if v}
    module = compile_module(model, args.config, calibrate=cal, range_scale=args.range_scale,
                            wide_residual=args.wide_residual, **options)
    print(f"compiled in {time.perf_counter() - t0:.1f} s: {len(module.vta_tasks())} accelerator tasks")
    for line in calibration_lines(module.notes["calibration"]):
        print(line)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    cosines, ious, cycles = [], [], None
    for i, (view, rgb) in enumerate(views):
        x = real.ppocr_preprocess(rgb)[None]
        ref = session.run(None, {name: x})[0]
        device = args.device if i == 0 else "cpu"
        got = next(iter(module.run(x, device=device).values()))
        if device == "sim":
            cycles = module.report().accelerator_cycles
        cos, iou = docs.map_agreement(ref, got)
        cosines.append(cos)
        ious.append(iou)
        print(f"  {view:14s} map cosine {cos:.4f}, text-pixel IoU {iou:.3f} "
              f"({np.count_nonzero(ref > docs.THRESHOLD)} text pixels in float)")
    print(f"PP-OCRv4 det {args.size}x{args.size} on {args.config}, {len(views)} scan views: mean map cosine "
          f"{np.mean(cosines):.4f} (worst {np.min(cosines):.4f}), mean text-pixel IoU {np.mean(ious):.3f} "
          f"(worst {np.min(ious):.3f})")
    if cycles is not None:
        print(f"accelerator cycles per inference ({args.config}): {cycles:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
