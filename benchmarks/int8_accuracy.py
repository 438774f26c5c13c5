"""int8 accuracy and accelerator cycles of a network: cosine of the int8 logits (host int8 reference,
`device="cpu"`) against onnxruntime's float model on seeded standard-normal inputs, and, with --sim,
the cycle model's accelerator cycles on the first input and whether its logits equal the host's bit for bit.

Calibration is `make demo`'s: `--samples` seeded images from numpy's default_rng(0), then the test
inputs from the same generator.  MODEL is a zoo name, `resnet18-centred` (the zoo's ResNet-18 with a
centred classifier, issue 16's hard case) or an .onnx file.

    .venv/bin/python benchmarks/int8_accuracy.py resnet18 --sim
    .venv/bin/python benchmarks/int8_accuracy.py resnet18-centred --inputs 8
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.module.report import calibration_lines


def load(name: str) -> onnx.ModelProto:
    if name.endswith(".onnx"):
        return onnx.load(name)
    if name == "resnet18-centred":
        from vtakit.compiler.zoo.resnet import STAGE_BLOCKS, resnet

        return resnet("resnet18", STAGE_BLOCKS["resnet18"], seed=0, centred=True)
    return zoo.build(name)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--samples", type=int, default=4, help="calibration images")
    ap.add_argument("--inputs", type=int, default=4, help="test images")
    ap.add_argument("--sim", action="store_true", help="also run the first input on the cycle model")
    ap.add_argument("--calibration", default=None, help="compile_module's calibration (default its default)")
    ap.add_argument("--keep-float-until", type=float, default=None, help="target output cosine (auto keep-float)")
    ap.add_argument("--requant", default=None, help="compile_module's requant: auto, pow2 or multiplier")
    ap.add_argument("--range-scale", default=None, help="compile_module's range_scale: on or off")
    ap.add_argument("--equalize", default=None, help="compile_module's equalize: off, exact or clip-as-relu")
    ap.add_argument("--wide-residual", default=None, help="compile_module's wide_residual: on or off")
    ap.add_argument("--weight-rounding", default=None, help="compile_module's weight_rounding: gptq or nearest")
    args = ap.parse_args()
    model = load(args.model)
    inp = model.graph.input[0]
    shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.samples)]
    options = {k: v for k, v in dict(calibration=args.calibration, keep_float_until=args.keep_float_until,
                                                requant=args.requant, range_scale=args.range_scale,
                                                equalize=args.equalize, wide_residual=args.wide_residual,
                                                weight_rounding=args.weight_rounding).items()
               if v is not None}
    t0 = time.perf_counter()
    module = vtakit.compile(model, args.config, calibrate=samples, **options)
    print(f"compiled in {time.perf_counter() - t0:.1f} s {options}")
    for line in calibration_lines(module.notes.calibration):
        print(line)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = model.graph.output[0].name
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.inputs)]
    cos, agree, host = [], 0, []
    for x in xs:
        want = sess.run(None, {inp.name: x})[0]
        got = module.run(x, device="cpu")[out]
        host.append(got)
        cos.append(cosine(got, want))
        agree += int(got.argmax() == want.argmax())
    print(f"{args.model} on {args.config}: int8 (device=cpu) vs float onnxruntime over {len(xs)} inputs: "
          f"mean cosine {np.mean(cos):.4f} (min {np.min(cos):.4f}), top-1 agreement {agree}/{len(xs)}")
    if args.sim:
        got = module.run(xs[0], device="sim")[out]
        print(f"cycle model: {module.last_run.accelerator_cycles:,} accelerator cycles; logits bit-identical "
              f"to device=cpu: {np.array_equal(got, host[0])}")


if __name__ == "__main__":
    main()
