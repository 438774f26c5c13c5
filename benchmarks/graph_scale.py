"""Graph size scaling: `compile_module` (import, graph passes, calibration, quantization, partition,
lowering, DRAM plan) on chains of 1k to 200k nodes, and the time per node, so linearity shows.

Two chains, both made here from a seed (no downloads):
  elementwise: x -> Relu -> Add(c) -> Mul(s) -> Relu -> ..., every Add/Mul with its own small
               initializer (as exporters write them; many are equal, so CSE merges them);
  conv:        Conv 1x1 (+ bias) -> Relu -> Add(c) -> ..., a network of accelerator tasks.
A linear pipeline shows a flat "CPU us/node" column; a quadratic one grows with n.  CPU seconds are
the figure to compare on a shared machine (others' load stretches the wall time).  Measured on the
2-core machine: the 200k elementwise chain compiles in 36 s CPU and peaks at 1.2 GB (before the
linear passes and calibration's per-method statistics: 149 s, 13.9 GB; 22 s already at 4k nodes).

    python benchmarks/graph_scale.py                       # elementwise 1k 10k 50k 200k, conv 1k 5k
    python benchmarks/graph_scale.py --sizes 1000 20000 --chain conv
    python benchmarks/graph_scale.py --profile 20000       # cProfile of one compile, top 30 by cumulative
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def chain_model(n_nodes: int, kind: str = "elementwise", width: int = 16, seed: int = 0) -> onnx.ModelProto:
    """An ONNX chain of about `n_nodes` nodes of `kind` ("elementwise" or "conv"), weights seeded."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    shape = [1, width] if kind == "elementwise" else [1, width, 4, 4]
    prev = "x"

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    cycle = ("Relu", "Add", "Mul") if kind == "elementwise" else ("Conv", "Relu", "Add")
    for i in range(n_nodes):
        op, out = cycle[i % len(cycle)], f"t{i}"
        if op == "Relu":
            nodes.append(helper.make_node("Relu", [prev], [out], name=f"relu{i}"))
        elif op == "Add":  # few distinct values: duplicated initializers, as exporters write them
            c = const(f"c{i}", np.array([rng.integers(-2, 3) / 8], np.float32))
            nodes.append(helper.make_node("Add", [prev, c], [out], name=f"add{i}"))
        elif op == "Mul":
            s = const(f"s{i}", np.array([1.0 + rng.integers(-2, 3) / 16], np.float32))
            nodes.append(helper.make_node("Mul", [prev, s], [out], name=f"mul{i}"))
        else:
            w = const(f"w{i}", rng.standard_normal((width, width, 1, 1)) / np.sqrt(width))
            b = const(f"b{i}", rng.standard_normal(width) * 0.1)
            nodes.append(helper.make_node("Conv", [prev, w, b], [out], name=f"conv{i}"))
        prev = out
    graph = helper.make_graph(nodes, f"{kind}_chain_{n_nodes}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def compile_seconds(model: onnx.ModelProto) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, accelerator tasks) of one `compile_module` of `model` for the default
    config.  CPU seconds are the figure to compare on a shared machine: other processes stretch the wall
    time, not this one's CPU time."""
    from vtakit.compiler.pipeline import compile_module

    t0, c0 = time.perf_counter(), time.process_time()
    module = compile_module(model)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, sum(1 for t in module.tasks if not isinstance(t, str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", help="chain lengths (nodes)")
    ap.add_argument("--chain", choices=("elementwise", "conv", "both"), default="both")
    ap.add_argument("--profile", type=int, metavar="N", help="profile one compile of an N-node chain")
    args = ap.parse_args()
    if args.profile:
        model = chain_model(args.profile, "elementwise" if args.chain == "both" else args.chain)
        prof = cProfile.Profile()
        prof.runcall(compile_seconds, model)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
        return
    chains = ("elementwise", "conv") if args.chain == "both" else (args.chain,)
    print(f"{'chain':<12} {'nodes':>8} {'MB':>6} {'tasks':>7} {'wall s':>8} {'CPU s':>8} {'CPU us/node':>12}")
    for kind in chains:
        sizes = args.sizes or ((1000, 10000, 50000, 200000) if kind == "elementwise" else (1000, 5000))
        for n in sizes:
            model = chain_model(n, kind)
            mb = model.ByteSize() / 1e6
            wall, cpu, tasks = compile_seconds(model)
            print(f"{kind:<12} {n:>8} {mb:>6.1f} {tasks:>7} {wall:>8.2f} {cpu:>8.2f} {cpu / n * 1e6:>12.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
