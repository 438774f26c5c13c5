"""GPU backend speed: our PTX kernels against PyTorch on the same GPU, at the zoo models' shapes.

Both sides get their inputs already on the device and are timed the same way:
N back-to-back calls, then a device synchronise, best of `--repeat` rounds, so
per-call framework overhead (ours: Python validation and planning, PyTorch's
dispatcher) is included on both sides.  PyTorch's TF32 is switched off so both
compute in float32.  PyTorch has no int8 convolution or matmul on CUDA, so the
int8 rows compare with its float32 operator of the same shape.  Without a GPU,
or without a CUDA build of PyTorch, the script says so and exits (our column
alone is printed when only PyTorch is missing).  Each row names the issue's target for
its family (conv2d and dense within 3x of cuDNN/cuBLAS, elementwise, pooling and
softmax within 1.5x; layout rows have none) and whether it met it.

    .venv/bin/python benchmarks/cuda_kernels.py [--json] [--repeat N] [--calls N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from vtakit.compiler.backends import cuda


TARGETS = {"conv2d": 3.0, "dense": 3.0, "elementwise": 1.5, "pooling": 1.5, "softmax": 1.5}
"""The most ours/torch may be, per family (issue 44)."""


@dataclass
class Row:
    kernel: str
    shape: str
    family: str
    ours_ms: float | None
    torch_ms: float | None
    error: str = ""  # why a side was not measured (one failing kernel does not end the run)

    @property
    def ratio(self) -> float | None:
        return None if self.torch_ms is None or self.ours_ms is None else self.ours_ms / self.torch_ms

    @property
    def target(self) -> float | None:
        return TARGETS.get(self.family)

    @property
    def meets(self) -> bool | None:
        return None if self.ratio is None or self.target is None else self.ratio <= self.target


@dataclass
class Case:
    """One row: how to call our kernel and PyTorch's on the same device-resident data."""

    kernel: str
    shape: str
    ours: Callable[[], object]
    torch: Callable[[], object] | None
    family: str = ""


def best_ms(run: Callable[[], object], synchronize: Callable[[], None], calls: int, repeat: int) -> float:
    run()  # compile / load / autotune outside the timing
    synchronize()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        synchronize()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def cases(gpu, torch) -> list[Case]:
    rng = np.random.default_rng(0)
    F = torch.nn.functional if torch is not None else None

    def floats(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def int8(*shape):
        return rng.integers(-128, 128, shape).astype(np.int8)

    def both(array):
        """(our DeviceArray, the PyTorch CUDA tensor of the same values)."""
        ours = gpu.upload(array)
        theirs = torch.from_numpy(array).cuda() if torch is not None else None
        return ours, theirs

    def theirs(make: Callable[[], Callable[[], object]]) -> Callable[[], object] | None:
        return make() if torch is not None else None

    rows: list[Case] = []

    def conv(label, x_shape, w_shape, stride=1, pad=0, groups=1):
        (x, tx), (w, tw) = both(floats(*x_shape)), both(floats(*w_shape))
        (b, tb) = both(floats(w_shape[0]))
        pads = (pad,) * 4
        shape = f"{'x'.join(map(str, x_shape))} -> {w_shape[0]}"
        rows.append(Case(label, shape, lambda: cuda.conv2d(x, w, b, stride=stride, pads=pads, groups=groups),
                         theirs(lambda: lambda: F.conv2d(tx, tw, tb, stride=stride, padding=pad, groups=groups)),
                         "conv2d"))

    conv("conv2d 7x7/2", (1, 3, 224, 224), (64, 3, 7, 7), stride=2, pad=3)
    conv("conv2d 3x3", (1, 64, 56, 56), (64, 64, 3, 3), pad=1)
    conv("conv2d 3x3", (1, 512, 7, 7), (512, 512, 3, 3), pad=1)
    conv("conv2d 1x1/2", (1, 128, 28, 28), (256, 128, 1, 1), stride=2)
    conv("conv2d 1x1", (1, 512, 14, 14), (512, 512, 1, 1))
    conv("depthwise 3x3", (1, 32, 112, 112), (32, 1, 3, 3), pad=1, groups=32)
    conv("conv2d 3x3", (32, 64, 56, 56), (64, 64, 3, 3), pad=1)
    conv("conv2d 3x3", (32, 512, 7, 7), (512, 512, 3, 3), pad=1)
    conv("conv2d 1x1", (32, 512, 14, 14), (512, 512, 1, 1))
    conv("depthwise 3x3", (32, 32, 112, 112), (32, 1, 3, 3), pad=1, groups=32)

    (xq, _), (wq, _) = both(int8(1, 64, 56, 56)), both(int8(64, 64, 3, 3))
    (bq, _) = both(rng.integers(-5000, 5000, 64).astype(np.int32))
    tx, tw = (torch.randn(1, 64, 56, 56, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda")) \
        if torch is not None else (None, None)
    rows.append(Case("int8 conv 3x3 (int8 out) vs torch float", "1x64x56x56 -> 64",
                     lambda: cuda.conv2d(xq, wq, bq, pads=(1, 1, 1, 1), shift=9, clip=(0, 127)),
                     theirs(lambda: lambda: F.conv2d(tx, tw, padding=1)), "conv2d"))

    (v, tv), (m, tm) = both(floats(1, 512)), both(floats(1000, 512))
    (c, tc) = both(floats(1000))
    rows.append(Case("dense", "1x512 -> 1000", lambda: cuda.dense(v, m, c),
                     theirs(lambda: lambda: F.linear(tv, tm, tc)), "dense"))
    (v32, tv32) = both(floats(32, 512))
    rows.append(Case("dense", "32x512 -> 1000", lambda: cuda.dense(v32, m, c),
                     theirs(lambda: lambda: F.linear(tv32, tm, tc)), "dense"))
    (vq, _), (mq, _) = both(int8(1, 512)), both(int8(1000, 512))
    rows.append(Case("int8 dense (int32 out) vs torch float", "1x512 -> 1000", lambda: cuda.dense(vq, mq),
                     theirs(lambda: lambda: F.linear(tv, tm)), "dense"))

    (p, tp) = both(floats(1, 64, 112, 112))
    rows.append(Case("max pool 3x3/2", "1x64x112x112", lambda: cuda.max_pool2d(p, kernel=3, stride=2, pads=1),
                     theirs(lambda: lambda: F.max_pool2d(tp, 3, 2, 1)), "pooling"))
    (a, ta) = both(floats(1, 32, 16, 16))
    rows.append(Case("avg pool 2x2/2", "1x32x16x16", lambda: cuda.avg_pool2d(a, kernel=2, stride=2, pads=0),
                     theirs(lambda: lambda: F.avg_pool2d(ta, 2, 2)), "pooling"))
    (g, tg) = both(floats(1, 512, 7, 7))
    rows.append(Case("global avg pool", "1x512x7x7", lambda: cuda.global_avg_pool(g),
                     theirs(lambda: lambda: F.adaptive_avg_pool2d(tg, 1)), "pooling"))
    (s, ts) = both(floats(1, 1000))
    rows.append(Case("softmax", "1x1000", lambda: cuda.softmax(s), theirs(lambda: lambda: torch.softmax(ts, -1)),
                     "softmax"))
    (e1, te1), (e2, te2) = both(floats(1, 64, 56, 56)), both(floats(1, 64, 56, 56))
    rows.append(Case("add", "1x64x56x56", lambda: cuda.add(e1, e2), theirs(lambda: lambda: te1 + te2),
                     "elementwise"))
    rows.append(Case("transpose NCHW->NHWC", "1x64x56x56", lambda: cuda.transpose(e1, (0, 2, 3, 1)),
                     theirs(lambda: lambda: te1.permute(0, 2, 3, 1).contiguous())))
    (qi, tqi) = both(floats(1, 3, 224, 224))
    rows.append(Case("quantize", "1x3x224x224", lambda: cuda.quantize(qi, 5),
                     theirs(lambda: lambda: torch.clamp(torch.round(tqi * 32.0), -128, 127).to(torch.int8)),
                     "elementwise"))
    return rows


def cuda_torch():
    """PyTorch when it is a CUDA build that sees a GPU, else (None, why not)."""
    try:
        import torch  # pyright: ignore[reportMissingImports]  (optional: a CUDA build of torch, to compare against)
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} cannot use the GPU (a CPU-only build, or no driver)"
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    return torch, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--repeat", type=int, default=5, help="timing rounds (the best counts)")
    parser.add_argument("--calls", type=int, default=50, help="calls per round")
    args = parser.parse_args(argv)
    ok, why = cuda.gpu_available()
    if not ok:
        print(json.dumps(dict(skipped=why)) if args.json else f"skipped: {why}")
        return 0
    gpu = cuda.default_gpu()
    torch, torch_why = cuda_torch()
    if torch is None:
        print(f"PyTorch column skipped: {torch_why}", file=sys.stderr)
    device = f"{gpu.name} (sm_{gpu.capability[0]}{gpu.capability[1]}), PTX for {gpu.arch}"
    rows = []
    for case in cases(gpu, torch):
        times, errors = [], []
        for run, synchronize in ((case.ours, gpu.synchronize),
                                 (case.torch, torch.cuda.synchronize if torch is not None else None)):
            try:
                times.append(None if run is None else best_ms(run, synchronize, args.calls, args.repeat))
            except Exception as exc:  # noqa: BLE001 - the row says what failed; the other rows still run
                times.append(None)
                errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        rows.append(Row(case.kernel, case.shape, case.family, times[0], times[1], "; ".join(errors)))
    if args.json:
        print(json.dumps(dict(device=device, torch=None if torch is None else torch.__version__,
                              rows=[dict(asdict(r), ratio=r.ratio, target=r.target, meets=r.meets) for r in rows]), indent=2))
        return 0
    print(f"{device}; PyTorch {torch.__version__ if torch is not None else 'n/a'}")
    print("| kernel | shape | ours ms | torch ms | ours/torch | target |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        torch_ms = "n/a" if r.torch_ms is None else f"{r.torch_ms:.3f}"
        ratio = "n/a" if r.ratio is None else f"{r.ratio:.2f}"
        target = "" if r.target is None else f"{r.target:g}x: {'met' if r.meets else 'missed'}"
        ours_ms = "n/a" if r.ours_ms is None else f"{r.ours_ms:.3f}"
        print(f"| {r.kernel} | {r.shape} | {ours_ms} | {torch_ms} | {ratio} | {target} {r.error} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
