"""Whole networks on the GPU: ResNet-18 and MobileNet-v1, float32 and int8, against PyTorch and onnxruntime.

Per network, precision and batch (1: latency, 32: throughput), the median time
of one run from a host array to host outputs, on every side:

- ours, float32: `vtakit.compile(model, target="cuda")`, every node on the GPU;
- ours, int8: the module `vtakit.compile(model, "pynq", calibrate=..., host="cuda")`
  builds, run with `device="cuda"`: the accelerator's int8 arithmetic, every node
  on the GPU.  Its outputs are checked equal to `device="cpu"` (the bit-exact
  reference).  At batch 32 the int8 graph compiled at batch 1 runs on 32 images
  (`rebatched`): the accelerator program is batch-specific and lowering it for
  32 images takes minutes, the graph is not; its outputs are checked equal
  to 32 single-image runs;
- PyTorch eager on the GPU: the zoo's ONNX graph walked node by node with
  torch.nn.functional and the same weights (`torch_network`), TF32 off;
  PyTorch has no int8 convolution on CUDA, so int8 rows name its float32 time;
- onnxruntime on the CPU (all cores): the same ONNX file; for int8 a QDQ model
  from onnxruntime's own static quantizer (per channel, int8 activations).

`--target vta --host cuda` is not timed: there the accelerator is a simulator
and its time is the simulator's, not the GPU's.  Rows are written to `--out`
after each one, so a run stopped by a time limit keeps what it measured.
Without a GPU (or a CUDA build of PyTorch) the script says so and exits 0.

    python benchmarks/gpu_networks.py [--out FILE.json] [--networks resnet18,mobilenet_v1] [--batches 1,32]
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.backends import cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere: benchmarks.*
from benchmarks.cuda_kernels import cuda_torch  # noqa: E402  (one check of a CUDA build of torch for both)

NETWORKS = ("resnet18", "mobilenet_v1")


@dataclass
class Row:
    network: str
    precision: str
    batch: int
    runner: str
    ms: float | None  # median time of one run (one batch)
    images_per_s: float | None
    check: str  # what the outputs were compared with, and the result
    note: str = ""


def median_ms(run: Callable[[], object], runs: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def max_relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / max(float(np.abs(want).max()), 1e-30))


# -- PyTorch: the ONNX graph walked with torch.nn.functional ------------------------------------------
def torch_network(model: onnx.ModelProto, torch, device: str = "cuda") -> Callable[[np.ndarray], np.ndarray]:
    """host array -> host array through the zoo graph's nodes on `device`, with the graph's own weights."""
    F = torch.nn.functional
    host = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weights = {name: torch.from_numpy(np.array(a)).to(device) for name, a in host.items()}
    steps: list[tuple[Callable, list[str], str]] = []

    def symmetric(pads: list[int], node: str) -> tuple[int, int]:
        if pads[:2] != pads[2:]:
            raise ValueError(f"{node}: asymmetric pads {pads} are not walked")
        return pads[0], pads[1]

    for n in model.graph.node:
        a = {attr.name: helper.get_attribute_value(attr) for attr in n.attribute}
        op = n.op_type
        if op == "Conv":
            padding = symmetric(list(a.get("pads", [0, 0, 0, 0])), n.name)
            f = (lambda x, w, b=None, s=tuple(a.get("strides", (1, 1))), p=padding, g=a.get("group", 1),
                 d=tuple(a.get("dilations", (1, 1))): F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=g))
        elif op == "BatchNormalization":
            f = (lambda x, scale, bias, mean, var, eps=a.get("epsilon", 1e-5):
                 F.batch_norm(x, mean, var, scale, bias, training=False, eps=eps))
        elif op == "Relu":
            f = F.relu
        elif op == "Clip":
            low, high = (float(host[t]) if t else None for t in (list(n.input) + ["", ""])[1:3])
            steps.append((lambda x, *_, lo=low, hi=high: torch.clamp(x, lo, hi), [n.input[0]], n.output[0]))
            continue
        elif op == "Add":
            f = torch.add
        elif op == "MaxPool":
            f = (lambda x, k=tuple(a["kernel_shape"]), s=tuple(a.get("strides", (1, 1))),
                 p=symmetric(list(a.get("pads", [0, 0, 0, 0])), n.name): F.max_pool2d(x, k, s, p))
        elif op == "GlobalAveragePool":
            f = (lambda x: F.adaptive_avg_pool2d(x, 1))
        elif op == "Flatten":
            f = (lambda x, axis=a.get("axis", 1): torch.flatten(x, axis))
        elif op == "Gemm":
            if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
                raise ValueError(f"{n.name}: only Gemm with alpha = beta = 1 and no transA is walked")
            f = (lambda x, w, b=None, t=a.get("transB", 0): F.linear(x, w if t else w.t(), b))
        elif op == "Softmax":
            f = (lambda x, axis=a.get("axis", -1): torch.softmax(x, axis))
        else:
            raise ValueError(f"{n.name}: op {op} is not walked")
        steps.append((f, list(n.input), n.output[0]))
    source, result = model.graph.input[0].name, model.graph.output[0].name

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            env = dict(weights)
            env[source] = torch.from_numpy(x).to(device)
            for f, inputs, output in steps:
                env[output] = f(*(env[t] for t in inputs if t))
            return env[result].cpu().numpy()  # the copy back waits for the GPU
    return run


# -- onnxruntime on the CPU ------------------------------------------------------------------------
def ort_session(model: onnx.ModelProto, ort):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def ort_int8_model(model: onnx.ModelProto, samples: list[np.ndarray]) -> onnx.ModelProto:
    """onnxruntime's static QDQ quantization (int8 weights per channel, int8 activations, MinMax)."""
    from onnxruntime.quantization import (  # lazy: onnxruntime's quantizer is only needed for this row
        CalibrationDataReader, QuantFormat, QuantType, quantize_static)

    name = model.graph.input[0].name
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer warns once per weight through the root logger

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._feeds = iter([{name: s} for s in samples])

        def get_next(self):
            return next(self._feeds, None)

    with tempfile.TemporaryDirectory(prefix="vtakit-ort-") as folder:
        source, target = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        onnx.save(model, str(source))
        quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
        return onnx.load(str(target))


# -- ours --------------------------------------------------------------------------------------------
SHAPE_OPS = {"Reshape", "Expand", "Tile", "ConstantOfShape", "Slice", "Split", "Resize", "Upsample"}
"""Ops whose constant operands may name the batch: `rebatched` refuses graphs that hold one."""


def rebatched(module, batch: int):
    """A shallow copy of an int8 module whose graph takes `batch` images: every non-constant tensor's
    leading 1 becomes `batch`.  The host kernels read shapes from their operands, so for networks whose
    activations all lead with the batch (these CNNs) the arithmetic per image is unchanged (checked by
    the caller against single-image runs).  A graph with an op that carries a shape (Reshape, ...) is refused."""
    carriers = sorted({n.op for n in module.graph.nodes} & SHAPE_OPS)
    if carriers:
        raise ValueError(f"cannot rebatch a graph with {', '.join(carriers)}: its shapes name the batch")
    graph = copy.copy(module.graph)
    graph.tensors = {name: (replace(info, shape=(batch, *info.shape[1:]))
                            if name not in graph.consts and info.shape[:1] == (1,) else info)
                     for name, info in graph.tensors.items()}
    view = copy.copy(module)
    view.graph = graph
    return view


def calibration(name: str, batch: int = 1, count: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(zoo.input_shape(name, batch)).astype(np.float32) for _ in range(count)]


@functools.lru_cache(maxsize=None)
def int8_module(name: str):
    """The network compiled for the accelerator (batch 1) with its host tasks on the GPU, once per process."""
    return vtakit.compile(zoo.build(name), "pynq", calibrate=calibration(name), host="cuda")


def measure(name: str, batch: int, torch, ort, runs: int, rows: list[Row], emit: Callable[[], None]) -> None:
    model = zoo.build(name, batch=batch)
    x = np.random.default_rng(3).standard_normal(zoo.input_shape(name, batch)).astype(np.float32)
    images = lambda ms: None if ms is None else batch / (ms / 1e3)  # noqa: E731

    def add(precision, runner, ms, check, note=""):
        rows.append(Row(name, precision, batch, runner, ms, images(ms), check, note))
        emit()

    torch_run = torch_network(model, torch) if torch is not None else None
    want = torch_run(x) if torch_run is not None else None
    torch_ms = median_ms(lambda: torch_run(x), runs) if torch_run is not None else None
    add("float32", "pytorch eager (GPU)", torch_ms, "reference" if torch is not None else "PyTorch with CUDA missing")

    module = vtakit.compile(model, target="cuda")
    got = module.run(x)["logits"]
    check = "no reference" if want is None else f"max rel err vs pytorch {max_relative_error(got, want):.2e}"
    add("float32", "ours --target cuda", median_ms(lambda: module.run(x), runs), check)

    if ort is not None:
        session = ort_session(model, ort)
        feed = {model.graph.input[0].name: x}
        ort_out = session.run(None, feed)[0]
        check = "no reference" if want is None else f"max rel err vs pytorch {max_relative_error(ort_out, want):.2e}"
        add("float32", "onnxruntime (CPU)", median_ms(lambda: session.run(None, feed), runs), check)

    int8 = int8_module(name)
    if batch == 1:
        on_gpu = int8.run(x, device="cuda")["logits"]
        same = np.array_equal(on_gpu, int8.run(x, device="cpu")["logits"])
        check, note, runner = f"bit-exact vs device=cpu: {same}", "", int8
    else:
        runner = rebatched(int8, batch)
        on_gpu = runner.run(x, device="cuda")["logits"]
        singles = np.concatenate([int8.run(x[i:i + 1], device="cpu")["logits"] for i in range(batch)])
        same = np.array_equal(on_gpu, singles)
        check = f"bit-exact vs {batch} single-image runs on the CPU: {same}"
        note = "int8 graph compiled at batch 1, run on the batch (see rebatched)"
    if want is not None:
        check += f"; max rel err vs float pytorch {max_relative_error(on_gpu, want):.2e}"
    add("int8", "ours --target vta, run device=cuda", median_ms(lambda: runner.run(x, device="cuda"), runs),
        check, note)
    add("int8", "pytorch eager (GPU)", torch_ms, "float32 time: PyTorch has no int8 convolution on CUDA")

    if ort is not None:
        try:
            quantized = ort_session(ort_int8_model(model, calibration(name, batch, 1)), ort)
        except Exception as exc:  # noqa: BLE001 - the quantizer's failure is a row's note, not the run's end
            add("int8", "onnxruntime QDQ (CPU)", None, "not measured", f"quantize_static failed: {exc}")
        else:
            feed = {model.graph.input[0].name: x}
            q_out = quantized.run(None, feed)[0]
            check = "no reference" if want is None else f"max rel err vs float pytorch {max_relative_error(q_out, want):.2e}"
            add("int8", "onnxruntime QDQ (CPU)", median_ms(lambda: quantized.run(None, feed), runs), check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the JSON here (after every row) as well as to stdout")
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per row (the median counts)")
    args = parser.parse_args(argv)
    ok, why = cuda.gpu_available()
    if not ok:
        print(json.dumps(dict(skipped=why)))
        if args.out is not None:
            args.out.write_text(json.dumps(dict(skipped=why)))
        return 0
    gpu = cuda.default_gpu()
    torch, torch_why = cuda_torch()
    try:
        import onnxruntime as ort  # lazy: optional, only for the CPU column
    except ImportError:
        ort = None
    result = dict(device=f"{gpu.name} (sm_{gpu.capability[0]}{gpu.capability[1]}), PTX for {gpu.arch}",
                  torch=torch.__version__ if torch is not None else torch_why,
                  onnxruntime=ort.__version__ if ort is not None else "not installed", rows=[])
    rows: list[Row] = []

    def emit() -> None:
        result["rows"] = [asdict(r) for r in rows]
        if args.out is not None:
            args.out.write_text(json.dumps(result, indent=2))
        print(json.dumps(asdict(rows[-1])), file=sys.stderr, flush=True)

    for batch in (int(b) for b in args.batches.split(",")):
        for name in args.networks.split(","):
            measure(name, batch, torch, ort, args.runs if batch == 1 else max(3, args.runs // 2), rows, emit)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
