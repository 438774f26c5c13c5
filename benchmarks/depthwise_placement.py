"""Depthwise convolutions on the accelerator: per-layer cycles and where mobile networks' layers run.

    .venv/bin/python benchmarks/depthwise_placement.py layers [--config pynq]
    .venv/bin/python benchmarks/depthwise_placement.py networks [--config pynq] [--host-gmacs 1.0]

`layers`: MobileNet-sized 3x3 stride-1 depthwise layers (int32 bias, per-channel shifts, ReLU6 clip) on
the cycle model, checked bit for bit against numpy, beside their host round trip (`depthwise.host_cycles`).
`networks`: EfficientNet-Lite0 (pretrained; calibrated on 8 photos, one test photo) and the zoo's
`mobilenet_v1` (two seeded standard-normal images): accelerator / host tasks, activations crossing
between host and DRAM, accelerator cycles of one inference, depthwise convs on the accelerator.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [(32, 112), (96, 56), (144, 56)]  # channels, height = width


def _support(name: str):
    """tests/support/<name>.py by path (an installed package may also be called `tests`)."""
    spec = importlib.util.spec_from_file_location(f"support_{name}", ROOT / "tests" / "support" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def layers(cfg) -> None:
    from vtakit.compiler.backends.vta import ops, reference
    from vtakit.compiler.backends.vta.depthwise import depthwise_def, depthwise_shape, host_cycles

    rng = np.random.default_rng(0)
    for c, h in LAYERS:
        x = rng.integers(-128, 128, (1, c, h, h), dtype=np.int8)
        w = rng.integers(-128, 128, (c, 1, 3, 3), dtype=np.int8)
        b = rng.integers(-50000, 50000, c, dtype=np.int32)
        shifts = rng.integers(6, 14, c)
        y, rep = ops.depthwise_conv2d(x, w, padding=1, bias=b, shift=shifts, clip=(0, 127), config=cfg, device="sim")
        exact = np.array_equal(y, reference.conv2d(x, w, 1, 1, b, shift=shifts, clip=(0, 127), groups=c))
        geometry = dict(n=1, c=c, h=h, w=h, kh=3, kw=3, stride=1, pads=(1,) * 4)
        compute = depthwise_def(cfg, **geometry, bias=True, shift=0, clip=(0, 127), channel_shift=True)
        host = host_cycles(cfg, depthwise_shape(cfg, **geometry, compute=compute))
        print(f"1x{c}x{h}x{h} 3x3 s1 ({cfg.label}): {rep.cycles:,} cycles (bit-exact: {exact}); host round trip "
              f"{host:,.0f}")


def _placement(label: str, module, x: np.ndarray) -> None:
    module.run(x, device="sim")
    rep = module.report()
    tasks = module.vta_tasks()
    vta = {t.node for t in tasks}
    depthwise = [n.name for n in module.graph.nodes if n.op == "QConv" and n.attrs["group"] > 1]
    print(f"{label}: accelerator / host tasks {len(tasks)} / {len(module.tasks) - len(tasks)}, crossings "
          f"{rep.border_transfers}, accelerator cycles {rep.accelerator_cycles:,}, depthwise convs on the "
          f"accelerator {sum(n in vta for n in depthwise)} of {len(depthwise)}")


def networks(cfg) -> None:
    from vtakit.compiler import zoo
    from vtakit.compiler.pipeline import compile_module

    real, photos = _support("real_models"), _support("photos")
    try:
        model = real.efficientnet_lite0_model()
    except real.ModelMissing as e:
        print(f"EfficientNet-Lite0 skipped: {e}")
    else:
        cal = [real.preprocess(v)[None] for _, v in photos.calibration_views(8)]
        _placement("EfficientNet-Lite0", compile_module(model, cfg, calibrate=cal),
                   real.preprocess(photos.test_views()[0][1])[None])
    rng = np.random.default_rng(0)
    cal = [rng.standard_normal(zoo.input_shape("mobilenet_v1")).astype(np.float32) for _ in range(2)]
    _placement("mobilenet_v1", compile_module(zoo.build("mobilenet_v1"), cfg, calibrate=cal), cal[0])


def main(argv: list[str] | None = None) -> int:
    from vtakit.compiler.backends.vta import depthwise
    from vtakit.isa.config import HwConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("layers", "networks"))
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--host-gmacs", type=float, default=depthwise.HOST_GMACS,
                    help="the host's depthwise multiply-accumulates per ns in the placement cost model")
    args = ap.parse_args(argv)
    depthwise.HOST_GMACS = args.host_gmacs
    cfg = HwConfig.load(args.config)
    if args.what == "layers":
        layers(cfg)
    else:
        networks(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
