"""ResNet-18 on pynq (no LOAD.ACC8, as VTA): where the int8 max pool and residual adds run, and what each costs.

`make demo`'s model, calibration and input, compiled four ways:
  acc8      pynq with LOAD.ACC8 switched on (what vtakit did before VTA's semantics became config fields)
  host      VTA's semantics, max pool and adds forced onto the host (what the compiler did before move.py)
  moved     VTA's semantics, int8 tiles moved by INP load + identity GEMM (lowering/move.py), adds unfused
  fused     as moved, each residual add (+ ReLU) fused into the conv producing one operand (graph/fusion.py)
For each: accelerator cycles, tasks, host<->DRAM crossings, cycles per op kind, the logits' cosine to
onnxruntime and whether device="cpu" (the host reference) and device="sim" agree bit for bit.

    .venv/bin/python benchmarks/resnet18_int8_moves.py [acc8 host moved fused]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import onnxruntime as ort

from vtakit.compiler import zoo
from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.passes.partition import PartitionOptions
from vtakit.isa import HwConfig


def main(variants: list[str]) -> None:
    pynq = HwConfig.preset("pynq")
    model = zoo.build("resnet18", seed=0)
    rng = np.random.default_rng(0)   # the demo's samples and input
    samples = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"data": x})[0].ravel()
    for variant in variants:
        t0 = time.perf_counter()
        cfg = pynq.replace(acc8_load=True) if variant == "acc8" else pynq
        options = PartitionOptions(fuse_residual=variant == "fused")
        if variant == "host":
            q_ops = compile_module(model, cfg, calibrate=samples, partition_options=options).graph.nodes
            host = tuple(n.name for n in q_ops if n.op in ("MaxPool", "QAdd"))
            options = PartitionOptions(host_nodes=host, fuse_residual=False)
        module = compile_module(model, cfg, calibrate=samples, partition_options=options)
        got = module.run(x, device="sim")["logits"]
        rep = module.report()
        same = np.array_equal(got, module.run(x, device="cpu")["logits"])
        cos = float(got.ravel() @ want / np.linalg.norm(got) / np.linalg.norm(want))
        kinds: dict[str, list[int]] = {}
        for r in rep.rows:
            if r.place == "vta":
                kind = r.op + ("+add" if "residual" in module.graph.node(r.node).attrs else "")
                kinds.setdefault(kind, []).append(r.cycles or 0)
        vta = len(module.vta_tasks())
        print(f"{variant:6s} {rep.accelerator_cycles:>12,} cycles  {vta} accelerator / {len(module.tasks) - vta} host "
              f"tasks  {rep.border_transfers} crossings  host {rep.host_ms:.0f} ms  cosine {cos:.5f}  "
              f"cpu==sim {same}  ({time.perf_counter() - t0:.0f} s)")
        for kind, cycles in sorted(kinds.items()):
            print(f"       {kind:12s} x{len(cycles):2d}  {sum(cycles):>11,} cycles")


if __name__ == "__main__":
    main(sys.argv[1:] or ["acc8", "host", "moved", "fused"])
