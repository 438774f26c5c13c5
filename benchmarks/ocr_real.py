"""int8 on the accelerator vs float onnxruntime on real pretrained OCR networks and a real scan.

    .venv/bin/python benchmarks/ocr_real.py [--model det|cls|rec] [--config pynq] [--size 320] [--device sim|cpu]
        [--calibration METHOD] [--equalize MODE] [--range-scale on|off] [--wide-residual auto|on|off]
        [--weight-rounding auto|gptq|nearest]   (auto: the compiler's recipe search, the default)

The networks: PP-OCR's from RapidOCR's `rapidocr-onnxruntime` wheel (`make install` installs it without
its dependencies; the script says so when it is absent).
- det (default): PP-OCRv4's text detector, a DBNet with a PP-LCNetV3 backbone (hardswish and a learned
  affine on the host before most convs).  Calibration: 8 pages rendered with matplotlib
  (tests/support/documents.py).  Test: 8 views of scikit-image's `page` scan.  Printed per view and
  on average: the cosine of the text probability maps, and the IoU of the text pixels (probability >
  0.3, DBNet's threshold), int8 against float.
- cls: the text-line direction classifier (MobileNetV3); rec: PP-OCRv4's recognizer (PP-LCNetV3 +
  SVTR).  Calibration: 8 strips of the rendered pages; test: 8 strips of the scan views, 48 x 192
  (cls) or 48 x 320 (rec).  Printed: the mean cosine of the softmax outputs, and for rec how many
  timesteps agree with float on the most likely character.
Then the accelerator cycles of one inference (--device sim).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from real_accuracy import _support

LINE_WIDTH = {"cls": 192, "rec": 320}


def main(argv: list[str] | None = None) -> int:
    from vtakit.compiler.pipeline import compile_module
    from vtakit.compiler.module.report import calibration_lines

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="det", choices=("det", "cls", "rec"))
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--size", type=int, default=320, help="det's input side (a multiple of 32)")
    ap.add_argument("--device", default="sim", help="sim (cycle model; the first view, the rest on cpu) or cpu")
    ap.add_argument("--range-scale", default="on", choices=("on", "off"))
    ap.add_argument("--wide-residual", default="auto", choices=("auto", "on", "off"))
    ap.add_argument("--weight-rounding", default="auto", choices=("auto", "gptq", "nearest"))
    ap.add_argument("--equalize", default=None, help="compile_module's equalize: off, exact or clip-as-relu")
    ap.add_argument("--calibration", default=None, help="compile_module's calibration method (default auto)")
    args = ap.parse_args(argv)
    real, docs = _support("real_models"), _support("documents")
    det = args.model == "det"
    height, width = (args.size, args.size) if det else (48, LINE_WIDTH[args.model])
    try:
        model = real.ppocr_model(args.model, height, width)
    except real.ModelMissing as e:
        print(f"skipped: {e}")
        return 0
    import onnxruntime as ort

    side = args.size if det else 320  # the text lines are cut from 320 x 320 pages
    pages = docs.calibration_pages(8, side)
    scans = docs.test_scans(side)
    if det:
        cal_images, views = pages, scans
    else:
        cal_images = docs.text_strips(pages, 1, 0, height, width)
        views = [(f"{name}/strip", s) for (name, v) in scans for s in docs.text_strips([v], 1, 1, height, width)]
    cal = [real.ppocr_preprocess(p, args.model)[None] for p in cal_images]
    t0 = time.perf_counter()
    options = {k: v for k, v in (("equalize", args.equalize), ("calibration", args.calibration)) if v}
    module = compile_module(model, args.config, calibrate=cal, range_scale=args.range_scale,
                            weight_rounding=args.weight_rounding,
                            wide_residual=args.wide_residual, **options)
    print(f"compiled in {time.perf_counter() - t0:.1f} s: {len(module.vta_tasks())} accelerator tasks")
    for line in calibration_lines(module.notes.calibration):
        print(line)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    cosines, ious, agree, cycles = [], [], [], None
    for i, (view, rgb) in enumerate(views):
        x = real.ppocr_preprocess(rgb, args.model)[None]
        ref = session.run(None, {name: x})[0]
        device = args.device if i == 0 else "cpu"
        got = next(iter(module.run(x, device=device).values()))
        if device == "sim":
            cycles = module.report().accelerator_cycles
        if det:
            cos, iou = docs.map_agreement(ref, got)
            ious.append(iou)
            print(f"  {view:14s} map cosine {cos:.4f}, text-pixel IoU {iou:.3f} "
                  f"({np.count_nonzero(ref > docs.THRESHOLD)} text pixels in float)")
        else:
            r, g = ref.reshape(-1, ref.shape[-1]).astype(np.float64), np.asarray(got).reshape(-1, ref.shape[-1])
            cos = float(np.sum(r * g) / (np.linalg.norm(r) * np.linalg.norm(g) + 1e-30))
            agree.append(float(np.mean(r.argmax(1) == g.argmax(1))))
        cosines.append(cos)
    summary = f"PP-OCR {args.model} {height}x{width} on {args.config}, {len(views)} views: mean cosine " \
              f"{np.mean(cosines):.4f} (worst {np.min(cosines):.4f})"
    if det:
        summary += f", mean text-pixel IoU {np.mean(ious):.3f} (worst {np.min(ious):.3f})"
    else:
        summary += f", argmax equal to float's on {np.mean(agree):.1%} of the outputs"
    print(summary)
    if cycles is not None:
        print(f"accelerator cycles per inference ({args.config}): {cycles:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
