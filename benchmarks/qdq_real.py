"""A real pretrained network quantized by ONNX Runtime, compiled by vtakit with the model's own scales.

    .venv/bin/python benchmarks/qdq_real.py [--model efficientnet_lite0|open_nsfw] [--config pynq_mul]
        [--per-tensor] [--range-scale on|off] [--device cpu|fsim|sim]

The user's flow: ORT's `quant_pre_process` (batch norm folded) and `quantize_static` (QDQ, int8 symmetric,
per-channel weights unless --per-tensor) calibrated on the same 8 photo crops vtakit's own calibration
uses (tests/support/photos.py), then `compile_module` on the QDQ file.  Printed against float onnxruntime
and against ORT running the QDQ graph as written (no graph optimizations; its fused kernels round
differently): top-1 agreement, top-5 overlap, mean logits cosine over the 24 test views; how many scales
the compiled module kept; whether the device's logits equal the host reference's; accelerator cycles
with --device sim.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from real_accuracy import MODELS, _support, load_model  # benchmarks/ is on sys.path when run as a script


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="efficientnet_lite0", choices=sorted(MODELS))
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor (ORT: per_channel=False)")
    ap.add_argument("--range-scale", default="on", choices=("on", "off"))
    ap.add_argument("--device", default="cpu", help="cpu (host reference), fsim or sim (cycle model)")
    args = ap.parse_args(argv)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from vtakit.compiler.module.notes import QdqNotes
    from vtakit.compiler.pipeline import compile_module

    real, photos, qm = _support("real_models"), _support("photos"), _support("qdq_models")
    model, preprocess = load_model(real, args.model)
    if model is None:
        return 0
    tmp = Path(tempfile.mkdtemp())
    onnx.save(model, str(tmp / "float.onnx"))
    quant_pre_process(str(tmp / "float.onnx"), str(tmp / "pre.onnx"), skip_symbolic_shape=True)
    cal = [preprocess(v)[None] for _, v in photos.calibration_views(8)]
    xs = [preprocess(v) for _, v in photos.test_views()]
    name = model.graph.input[0].name
    t0 = time.perf_counter()
    qdq = qm.ort_qdq(onnx.load(str(tmp / "pre.onnx")), tmp / "qdq.onnx", [{name: c} for c in cal],
                     per_channel=not args.per_tensor)
    print(f"ONNX Runtime quantized {args.model} in {time.perf_counter() - t0:.1f} s "
          f"({'per-tensor' if args.per_tensor else 'per-channel'} weights)")
    ref = real.float_logits(model, xs)
    as_written = np.stack([qm.ort_run(qdq, x[None], as_written=True)[0] for x in xs])
    fused = np.stack([qm.ort_run(qdq, x[None])[0] for x in xs])
    t0 = time.perf_counter()
    module = compile_module(qdq, args.config, calibrate=cal, range_scale=args.range_scale)
    print(f"vtakit compiled it for {args.config} in {time.perf_counter() - t0:.1f} s (range scaling {args.range_scale})")
    outs = [module.run(x[None], device=args.device)[module.graph.outputs[0]][0] for x in xs]
    got = np.stack(outs)
    cycles = module.report().accelerator_cycles if args.device == "sim" else None  # before the host run below
    host = module.run(xs[0][None], device="cpu")[module.graph.outputs[0]][0]
    note = module.notes.calibration.qdq or QdqNotes(0, (), True, ())
    notes = note.notes
    print(f"scales kept: {note.activations} activations, weights of {len(note.weights)} nodes; "
          f"{len(notes)} notes ({sum('not a power of two' in n for n in notes)} scales moved to a power of two)")
    for line in (n for n in notes if "kept exactly" in n):
        print(f"  {line}")
    print(f"{args.device} == host reference on the first view: {np.array_equal(got[0], host)}")
    if cycles is not None:
        print(f"accelerator cycles per inference: {cycles:,}")
    rows = [("ORT, the QDQ graph as written", as_written, ref), ("ORT, default session (fused int8 kernels)", fused, ref),
            ("vtakit", got, ref), ("vtakit against ORT as written", got, as_written)]
    for label, a, b in rows:
        m = real.agreement(b, a)
        against = "ORT as written" if b is as_written else "float"
        print(f"{label:44s} vs {against:14s}: top-1 {m.top1:.1%}, top-5 {m.top5:.1%}, cosine {m.cosine:.4f} "
              f"(worst {m.worst:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
