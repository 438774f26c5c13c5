"""CPU backend speed: our LLVM kernels against single-threaded onnxruntime and plain numpy.

For each representative shape: our kernel (after the JIT warm-up), onnxruntime
on a one-node ONNX model (session built once, intra_op_num_threads=1, so both
sides use one core) and a straightforward numpy formulation; the best of a
few runs of each (numpy's BLAS is limited to one thread as well).  Prints a
table, or JSON with --json.

    .venv/bin/python benchmarks/cpu_kernels.py [--json] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # numpy's BLAS on one core too, before numpy loads it

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from numpy.lib.stride_tricks import sliding_window_view  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from vtakit.compiler.backends import cpu  # noqa: E402

FLOAT = TensorProto.FLOAT
INT8 = TensorProto.INT8


@dataclass
class Case:
    """One row: a kernel on one shape and the three ways of computing it."""

    kernel: str
    shape: str
    ours: Callable[[], object]
    onnxruntime: Callable[[], object] | None
    numpy: Callable[[], object]


@dataclass
class Row:
    kernel: str
    shape: str
    ours_ms: float
    onnxruntime_ms: float | None
    numpy_ms: float

    @property
    def vs_onnxruntime(self) -> float | None:
        return None if self.onnxruntime_ms is None else self.ours_ms / self.onnxruntime_ms

    @property
    def vs_numpy(self) -> float:
        return self.ours_ms / self.numpy_ms


def one_node_session(op: str, inputs: dict[str, np.ndarray], initializers: dict[str, np.ndarray],
                     out_type: int = FLOAT, **attributes) -> Callable[[], object] | None:
    """A run() closure over an onnxruntime session holding one `op` node, or None if ORT refuses it."""
    names = [*inputs, *initializers]
    node = helper.make_node(op, names, ["y"], **attributes)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for name, a in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        initializer=[numpy_helper.from_array(a, name) for name, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every onnxruntime of the last years accepts
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - an op/type ORT does not implement: report n/a
        return None
    return lambda: session.run(None, inputs)


def numpy_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int = 1) -> np.ndarray:
    """im2col with sliding_window_view and one einsum/matmul per group."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    windows = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    if groups == x.shape[1] and w.shape[1] == 1:
        return np.einsum("nchwij,cij->nchw", windows, w[:, 0], optimize=True)
    n, c, oh, ow = windows.shape[:4]
    cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    return (cols @ w.reshape(w.shape[0], -1).T).reshape(n, oh, ow, -1).transpose(0, 3, 1, 2)


def cases(rng: np.random.Generator) -> list[Case]:
    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def small_ints(*shape):
        return rng.integers(-128, 128, shape).astype(np.int8)

    rows = []
    x, w, b = normal(1, 3, 224, 224), normal(64, 3, 7, 7), normal(64)
    rows.append(Case("conv2d 7x7/2 (ResNet C1)", "1x3x224x224 -> 64",
                     lambda: cpu.conv2d(x, w, b, stride=(2, 2), pads=(3, 3, 3, 3)),
                     one_node_session("Conv", {"x": x}, {"w": w, "b": b}, strides=[2, 2], pads=[3, 3, 3, 3]),
                     lambda: numpy_conv(x, w, 2, 3) + b[:, None, None]))
    x2, w2, b2 = normal(1, 64, 56, 56), normal(64, 64, 3, 3), normal(64)
    rows.append(Case("conv2d 3x3", "1x64x56x56 -> 64",
                     lambda: cpu.conv2d(x2, w2, b2, pads=(1, 1, 1, 1)),
                     one_node_session("Conv", {"x": x2}, {"w": w2, "b": b2}, pads=[1, 1, 1, 1]),
                     lambda: numpy_conv(x2, w2, 1, 1) + b2[:, None, None]))
    x3, w3, b3 = normal(1, 32, 112, 112), normal(32, 1, 3, 3), normal(32)
    rows.append(Case("conv2d depthwise 3x3", "1x32x112x112",
                     lambda: cpu.conv2d(x3, w3, b3, pads=(1, 1, 1, 1), groups=32),
                     one_node_session("Conv", {"x": x3}, {"w": w3, "b": b3}, pads=[1, 1, 1, 1], group=32),
                     lambda: numpy_conv(x3, w3, 1, 1, groups=32) + b3[:, None, None]))
    q, qw = small_ints(1, 64, 56, 56), small_ints(64, 64, 3, 3)
    rows.append(Case("conv2d int8 3x3 (int32 out)", "1x64x56x56 -> 64",
                     lambda: cpu.conv2d(q, qw, pads=(1, 1, 1, 1)),
                     one_node_session("ConvInteger", {"x": q}, {"w": qw}, out_type=TensorProto.INT32,
                                      pads=[1, 1, 1, 1]),
                     lambda: numpy_conv(q.astype(np.int32), qw.astype(np.int32), 1, 1)))
    v, fc, fb = normal(1, 512), normal(1000, 512), normal(1000)
    rows.append(Case("dense", "1x512 -> 1000",
                     lambda: cpu.dense(v, fc, fb),
                     one_node_session("Gemm", {"x": v}, {"w": fc, "b": fb}, transB=1),
                     lambda: v @ fc.T + fb))
    p = normal(1, 64, 112, 112)
    rows.append(Case("max_pool2d 3x3/2", "1x64x112x112",
                     lambda: cpu.max_pool2d(p, kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1)),
                     one_node_session("MaxPool", {"x": p}, {}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                     lambda: sliding_window_view(np.pad(p, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf),
                                                 (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(4, 5))))
    g = normal(1, 512, 7, 7)
    rows.append(Case("global_avg_pool", "1x512x7x7",
                     lambda: cpu.global_avg_pool(g),
                     one_node_session("GlobalAveragePool", {"x": g}, {}),
                     lambda: g.mean(axis=(2, 3), keepdims=True)))
    s = normal(1, 1000)

    def numpy_softmax():
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    rows.append(Case("softmax", "1x1000", lambda: cpu.softmax(s), one_node_session("Softmax", {"x": s}, {}, axis=-1),
                     numpy_softmax))
    t = normal(1, 64, 56, 56)
    rows.append(Case("transpose NCHW->NHWC", "1x64x56x56",
                     lambda: cpu.transpose(t, (0, 2, 3, 1)),
                     one_node_session("Transpose", {"x": t}, {}, perm=[0, 2, 3, 1]),
                     lambda: np.ascontiguousarray(t.transpose(0, 2, 3, 1))))
    a1, a2 = normal(1, 64, 56, 56), normal(1, 64, 56, 56)
    rows.append(Case("add", "1x64x56x56 + same",
                     lambda: cpu.add(a1, a2), one_node_session("Add", {"a": a1, "b": a2}, {}),
                     lambda: a1 + a2))
    return rows


def best_ms(run: Callable[[], object], repeat: int, budget_s: float = 1.5) -> float:
    """Best wall time of `repeat` runs (fewer if they would take longer than the budget), in ms."""
    run()  # warm-up: JIT compile, ORT arenas, page faults
    times = []
    deadline = time.perf_counter() + budget_s
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline and len(times) >= 3:
            break
    return min(times) * 1e3


def measure(repeat: int) -> list[Row]:
    rows = []
    for case in cases(np.random.default_rng(0)):
        ours = best_ms(case.ours, repeat)
        theirs = best_ms(case.onnxruntime, repeat) if case.onnxruntime else None
        rows.append(Row(case.kernel, case.shape, ours, theirs, best_ms(case.numpy, repeat)))
    return rows


def print_table(rows: list[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    host = cpu.host_target()
    info = cpu.cache_info()
    table = Table(title=f"CPU kernels, one core ({host.cpu}, {host.vector_bits}-bit vectors); "
                        f"{info.kernels} kernels compiled in {info.compile_seconds:.2f} s")
    for column in ("kernel", "shape", "ours ms", "onnxruntime ms", "numpy ms", "ours/onnxruntime", "ours/numpy"):
        table.add_column(column, justify="left" if column in ("kernel", "shape") else "right")
    for row in rows:
        ort_ms = "n/a" if row.onnxruntime_ms is None else f"{row.onnxruntime_ms:.3f}"
        ratio = "n/a" if row.vs_onnxruntime is None else f"{row.vs_onnxruntime:.2f}x"
        table.add_row(row.kernel, row.shape, f"{row.ours_ms:.3f}", ort_ms, f"{row.numpy_ms:.3f}", ratio,
                      f"{row.vs_numpy:.2f}x")
    Console(width=max(Console().width, 140)).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per measurement (best is kept)")
    args = parser.parse_args(argv)
    rows = measure(args.repeat)
    if args.json:
        print(json.dumps([{**asdict(row), "ours_over_onnxruntime": row.vs_onnxruntime,
                           "ours_over_numpy": row.vs_numpy} for row in rows], indent=2))
    else:
        print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
