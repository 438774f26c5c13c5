"""Quantized models in (compiler/quant/qdq.py): the trained digits CNN quantized by ONNX Runtime
(quantize_static, QDQ, int8 symmetric; per-channel off and on; and the per-channel model with every
scale moved to a power of two), compiled for the accelerator with the model's own scales.

Prints per model the held-out accuracy (360 digits) of: float onnxruntime, onnxruntime running the QDQ
model, vtakit int8 on the device (default the cycle model, `--device fsim` is faster and bit-identical);
the top-1 agreement of vtakit with onnxruntime's QDQ model (ORT's default optimized session, and the
graph as written) and how many of vtakit's logits, requantized to the model's output scale, equal
onnxruntime's int8 logits (meaningful where the scales are powers of two); whether device == cpu bit for bit on the
first inputs.  The float model calibrated by vtakit itself (no QDQ) is the baseline.

    .venv/bin/python benchmarks/qdq_digits.py --device sim [--config pynq_mul] [--range-scale on|off]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.zoo import digits_cnn, digits_data

# tests/support/qdq_models.py by path (an installed package may also be called `tests`)
_spec = importlib.util.spec_from_file_location(
    "support_qdq_models", Path(__file__).resolve().parents[1] / "tests" / "support" / "qdq_models.py")
_qm = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _qm
_spec.loader.exec_module(_qm)
ort_qdq, ort_run, power_of_two = _qm.ort_qdq, _qm.ort_run, _qm.power_of_two


def output_scale(model: onnx.ModelProto) -> float:
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    dq = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    return float(inits[dq.input[1]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="sim")
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--limit", type=int, default=360, help="test digits to score")
    ap.add_argument("--range-scale", default="on", choices=("on", "off"),
                    help="on: scales that are not powers of two met exactly by range scaling")
    args = ap.parse_args()
    xtr, _, xte, yte = digits_data()
    xte, yte = xte[: args.limit], yte[: args.limit]
    cal = [{"data": xtr[i: i + 1]} for i in range(64)]
    fm = digits_cnn(batch=1)
    tmp = Path(tempfile.mkdtemp())
    models = {"float (vtakit calibrates)": fm,
              "QDQ per-tensor": ort_qdq(fm, tmp / "pt.onnx", cal, per_channel=False),
              "QDQ per-channel": ort_qdq(fm, tmp / "pc.onnx", cal, per_channel=True)}
    models["QDQ per-channel, power of two"] = power_of_two(models["QDQ per-channel"])
    ref_f = np.concatenate([ort_run(fm, x[None]) for x in xte])
    print(f"float onnxruntime: accuracy {np.mean(ref_f.argmax(1) == yte):.4f}")
    for label, m in models.items():
        mod = compile_module(m, args.config, calibrate=[c["data"] for c in cal[:16]], range_scale=args.range_scale)
        out = np.concatenate([mod.run(x[None], device=args.device)["logits"] for x in xte])
        same = all(np.array_equal(mod.run(x[None], device="cpu")["logits"], out[i: i + 1])
                   for i, x in enumerate(xte[:8]))
        line = f"{label}: vtakit int8 on {args.device} accuracy {np.mean(out.argmax(1) == yte):.4f}"
        line += f", cosine vs float {np.mean([_cos(a, b) for a, b in zip(out, ref_f)]):.4f}, cpu == {args.device}: {same}"
        if m is not fm:
            ref_q = np.concatenate([ort_run(m, x[None]) for x in xte])
            s = output_scale(m)
            for how, ref_q in (("default", ref_q),
                               ("as written", np.concatenate([ort_run(m, x[None], as_written=True) for x in xte]))):
                d = np.clip(np.rint(out / s), -128, 127) - np.rint(ref_q / s)
                line += (f"\n    onnxruntime QDQ ({how}) accuracy {np.mean(ref_q.argmax(1) == yte):.4f}; vtakit top-1 = "
                         f"onnxruntime's {np.mean(out.argmax(1) == ref_q.argmax(1)):.4f}; int8 logits equal "
                         f"{np.mean(d == 0):.4f}, within 1 step {np.mean(np.abs(d) <= 1):.4f}")
            qn = mod.notes.calibration.qdq
            line += f"\n    scales kept: {qn.activations} activations, weights of {list(qn.weights)}, " \
                    f"all exact: {qn.exact}, {len(qn.notes)} notes"
        print(line, flush=True)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


if __name__ == "__main__":
    main()
