"""Run the onnx package's backend node tests (onnx/backend/test/data/node) on target cpu.

`run(filter)` compiles every test model whose ops the registry's families define (`ops.IMPORTS`),
binds its int64 inputs and Resize scales/sizes as constants (a static-shape compiler takes them at
compile time, as exporters write them), runs it on its first data set and compares with the expected outputs (rtol 1e-3, atol 1e-5, the
onnx backend's own tolerance is tighter for some); returns per-test outcomes so a test or a
script can report passed / supported / total."""

from __future__ import annotations

import glob
import os
import warnings

import numpy as np

SKIP_DTYPES = ()


VALUE_SHAPED = {"Range": (0, 1, 2), "NonZero": (0,), "OneHot": (1,), "Unique": (0,), "Compress": (1,)}
"""Per op, the inputs whose values (not only shapes) set the output's shape."""

DYNAMIC_SHAPE_REFUSALS = ("which depends on values fed at run time", "shapes are fixed at compile time")
"""The compiler's one-line refusals of a loop whose shapes change with the values it runs on (a static-shape
compiler, as for VALUE_SHAPED ops): not ours to pass, and the refusal itself is tested (test_control_flow)."""


def node_dirs() -> list[str]:
    import onnx

    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    return sorted(d for d in glob.glob(os.path.join(root, "test_*")) if os.path.exists(os.path.join(d, "model.onnx")))


def _load_pb(path: str):
    import onnx
    from onnx import numpy_helper

    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def supported(model) -> bool:
    """Every node's op, at the model's opset, is one a registry definition imports (an op whose definition
    starts at a later version, Scan before opset 9, is not)."""
    import onnx

    from vtakit.compiler.ops import IMPORTS

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def takes(n) -> bool:
        if n.op_type == "Constant":
            return True
        d = IMPORTS.get(n.op_type)
        if d is None:
            return False
        try:
            since = onnx.defs.get_schema(n.op_type, opset).since_version
        except Exception:  # noqa: BLE001 - an op the installed onnx does not define at this opset
            return False
        return not d.versions or since >= min(d.versions)

    return all(n.domain in ("", "ai.onnx") and takes(n) for n in model.graph.node)


def run_one(d: str) -> tuple[str, str]:
    """(outcome, detail): 'pass', 'fail', 'error' or 'unsupported'."""
    import onnx

    import vtakit

    model = onnx.load(os.path.join(d, "model.onnx"))
    if not supported(model):
        return "unsupported", ""
    data = sorted(glob.glob(os.path.join(d, "test_data_set_0", "input_*.pb")))
    outs = sorted(glob.glob(os.path.join(d, "test_data_set_0", "output_*.pb")))
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    feeds = {}
    try:
        for name, p in zip(names, data):
            feeds[name] = _load_pb(p)[1]
        wants = [_load_pb(p)[1] for p in outs]
    except Exception:  # noqa: BLE001 - sequences, optionals: not tensors, so not ours
        return "unsupported", "non-tensor test data"
    # A static-shape compiler binds shape-determining inputs at compile time: int64 inputs (axes, shapes,
    # pads, sizes, k, repeats), Resize/Upsample scales and the inputs whose values set an output's shape
    # (VALUE_SHAPED) become initializers, as exporters write them; fed, the compiler refuses them.
    from onnx import numpy_helper

    ranged = {n.input[k] for n in model.graph.node for k in VALUE_SHAPED.get(n.op_type, ()) if k < len(n.input)}
    frozen = {k: v for k, v in feeds.items() if v.dtype == np.int64 or k in ("scales", "sizes", "roi") or k in ranged}
    if frozen:
        model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in frozen.items())
        keep = [i for i in model.graph.input if i.name not in frozen]
        del model.graph.input[:]
        model.graph.input.extend(keep)
        feeds = {k: v for k, v in feeds.items() if k not in frozen}
    shapes = {k: tuple(v.shape) for k, v in feeds.items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = vtakit.compile(model, target="cpu", input_shapes=shapes)
            got = module.run(feeds, device="cpu")
    except Exception as e:  # noqa: BLE001 - every failure is an outcome here
        line = str(e).splitlines()[0] if str(e) else ""
        if isinstance(e, vtakit.CompileError) and any(m in line for m in DYNAMIC_SHAPE_REFUSALS):
            return "unsupported", f"value-dependent shape, refused by design: {line[:160]}"
        return "error", f"{type(e).__name__}: {line[:200]}"
    for o, want in zip(model.graph.output, wants):
        y = np.asarray(got[o.name])
        if y.shape != want.shape:
            return "fail", f"{o.name}: shape {y.shape} != {want.shape}"
        if want.dtype.kind in "fc":
            if not np.allclose(y.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-5, equal_nan=True):
                return "fail", f"{o.name}: max error {np.max(np.abs(y.astype(np.float64) - want)):.3g}"
        elif want.dtype.kind == "V":  # ml_dtypes' bfloat16, float8, int4, ...: exact, NaN equal to NaN
            if y.dtype != want.dtype or not np.array_equal(y.astype(np.float32), want.astype(np.float32),
                                                           equal_nan=True):
                return "fail", f"{o.name}: values differ ({y.dtype} vs {want.dtype})"
        elif not np.array_equal(y, want):
            return "fail", f"{o.name}: values differ"
    return "pass", ""


def run(pattern: str = "") -> dict[str, tuple[str, str]]:
    return {os.path.basename(d): run_one(d) for d in node_dirs() if pattern in os.path.basename(d)}


if __name__ == "__main__":  # python tests/support/node_tests.py [substring]
    import collections
    import sys

    res = run(sys.argv[1] if len(sys.argv) > 1 else "")
    count = collections.Counter(v[0] for v in res.values())
    sup = len(res) - count["unsupported"]
    print(f"passed {count['pass']} / supported {sup} / total {len(res)}")
    for k, (o, why) in sorted(res.items()):
        if o in ("fail", "error"):
            print(f"  {o}: {k}: {why}")
