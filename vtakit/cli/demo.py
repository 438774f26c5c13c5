"""`vtakit demo`: ResNet-18 compiled and run on the cycle model, or one of its layers (with a trace on request)."""

from __future__ import annotations

import time

import numpy as np

from vtakit.cli._common import CONFIG_HELP, DeprecatedAlias, console, load_config, png_path, require_full_install
from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.layers import RESNET18
from vtakit.compiler.module.report import VTA_C2_C11_MS
from vtakit.errors import VtaError, pc_side_missing
from vtakit.sim import SimDevice
from vtakit.tables import stats_tables

_MISSING = ""  # a PC-side package this command needs and a board's runtime lacks (errors.PC_SIDE)
try:
    from vtakit.compiler import zoo
    from vtakit.compiler.pipeline import compile_module
except ImportError as missing:  # a board's runtime: `vtakit demo` compiles, so it says it needs the full install
    _MISSING = pc_side_missing(missing)


def cmd_demo(args) -> int:
    require_full_install(_MISSING, "vtakit demo")
    return _network_demo(args) if args.layer is None else _layer_demo(args)


def _network_demo(args) -> int:
    """Compile ResNet-18 from the zoo for the config, run it on the cycle model, report per layer."""
    cfg = load_config(args.config)
    t0 = time.perf_counter()
    model = zoo.build("resnet18", seed=0)
    console.print(f"[bold]vtakit demo[/]: ResNet-18 (seeded weights, built in code) compiled for {cfg.label}, run on "
                  f"the cycle model; calibrated on {args.samples} seeded random images")
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(args.samples)]
    module = compile_module(model, cfg, calibrate=samples)
    t1 = time.perf_counter()
    console.print(f"compiled in {t1 - t0:.1f} s: {len(module.vta_tasks())} accelerator tasks, "
                  f"{len(module.tasks) - len(module.vta_tasks())} host tasks, DRAM arena "
                  f"{module.plan.arena_bytes / 2**20:.1f} MiB")
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    logits = module.run(x, device="sim")["logits"]
    t2 = time.perf_counter()
    console.print(f"simulated in {t2 - t1:.1f} s; top-5 classes {np.argsort(logits[0])[::-1][:5].tolist()}")
    rep = module.report()
    console.print(rep.table(host_rows=False))
    for line in rep.summary_lines():
        console.print(line)
    c2_c11 = [r for r in rep.rows if r.place == "vta" and r.op == "QConv" and r.node.startswith("layer")]
    if cfg.label == "pynq" and c2_c11:
        ms = sum(r.ms for r in c2_c11)
        console.print(f"the convolutions of layer1-layer4 (WORKLOADS.md's C2-C11 with their repeats): {ms:.1f} ms "
                      f"predicted at {cfg.clock_mhz:g} MHz; VTA measured {VTA_C2_C11_MS} ms for C2-C11 on the board")
    if args.plot:
        console.print(f"roofline written to {rep.roofline(args.plot)}")
    console.print("more: vtakit compile MODEL.onnx -o m.vtamod; vtakit run m.vtamod --input x.npy --report")
    return 0


def _layer_demo(args) -> int:
    cfg = load_config(args.config)
    layers = {layer.name: layer for layer in RESNET18}
    if args.layer not in layers:
        raise VtaError(f"no layer {args.layer!r}; ResNet-18 has {', '.join(layers)}")
    layer = layers[args.layer]
    console.print(f"[bold]vtakit demo[/]: ResNet-18 layer {layer.name} ({layer.c_in}->{layer.c_out} channels, "
                  f"{layer.hw}x{layer.hw}, {layer.kernel}x{layer.kernel} kernel, stride {layer.stride}) with VTA's "
                  f"epilogue (+bias, >>8, clip 0..127), compiled with the default schedule and run on the cycle "
                  f"model of config {cfg.label}")
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, layer.c_in, layer.hw, layer.hw), dtype=np.int8)
    w = rng.integers(-128, 128, (layer.c_out, layer.c_in, layer.kernel, layer.kernel), dtype=np.int8)
    b = rng.integers(-4096, 4096, layer.c_out, dtype=np.int32)
    device = SimDevice(cfg, model="cycle")
    device.trace = args.trace
    y, rep = ops.conv2d(x, w, stride=layer.stride, padding=layer.pad, bias=b, shift=8, clip=(0, 127),
                        config=cfg, device=device, name=layer.name)
    console.print(f"schedule: {rep.schedule}")
    console.print(f"{rep.instructions} instructions, {rep.uop_words} micro-op words, compiled in "
                  f"{rep.compile_s:.2f} s, simulated in {rep.run_s:.2f} s")
    for table in stats_tables(rep.stats):
        console.print(table)
    ok = bool(np.array_equal(y, reference.conv2d(x, w, layer.stride, layer.pad, b, shift=8, clip=(0, 127))))
    console.print(f"{layer.name}: {rep.cycles:,} cycles, {rep.utilization * 100:.1f} % of peak, {rep.gops:.1f} GOPS "
                  f"at {cfg.clock_mhz:g} MHz; result matches numpy: {'[green]yes[/]' if ok else '[red]NO[/]'}")
    if rep.stats.trace_path:
        console.print(f"trace written to {rep.stats.trace_path} (open in https://ui.perfetto.dev)")
    console.print("more: vtakit bench conv2d --workload resnet18")
    return 0 if ok else 1


def register(sub) -> None:
    m = sub.add_parser("demo", help="compile ResNet-18 and run it on the cycle model (or one layer: --layer)")
    m.add_argument("--config", help=CONFIG_HELP)
    m.add_argument("--layer", help="only this ResNet-18 layer (C1..C11)")
    m.add_argument("--trace", help="with --layer: write a Chrome/Perfetto trace JSON here")
    m.add_argument("--samples", type=int, default=4, help="calibration images (seeded random)")
    m.add_argument("--plot", metavar="PNG", type=png_path,
                   help="without --layer: write the roofline of the accelerator tasks here")
    m.add_argument("--roofline", dest="plot", action=DeprecatedAlias, new="--plot", type=png_path,
                   help="deprecated spelling of --plot")
    m.set_defaults(func=cmd_demo)
