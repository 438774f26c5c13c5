"""Fuzzing the ONNX import: mutated small valid models import (and optimize) or fail with exactly one
error from `vtakit.errors`, one short line; never another exception, never a read outside the model's
folder, never more memory than the limits allow.

Mutations edit one field of the ModelProto at a time, as a careless exporter or an attacker would:
dims of inputs and initializers, attributes, element types, node inputs, op types, opsets,
initializer bytes and external-data entries.  The models are tiny and the limits are lowered for the
run (`use_limits`), so no example can allocate much.  The default budget is short;
VTAKIT_FUZZ_EXAMPLES raises it (e.g. 2000 for a long run).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from vtakit.compiler.pipeline import optimize
from vtakit.compiler.frontend.limits import use_limits
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.errors import VtaError

EXAMPLES = int(os.environ.get("VTAKIT_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="VTAKIT_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DIMS = [0, 1, 2, 3, 7, -1, -(1 << 40), 1 << 20, 1 << 31, 1 << 62]
TYPES = [T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16, T.INT8, T.UINT8, T.INT32, T.INT64, T.BOOL, T.STRING, 0, 99]
OPS = ["Add", "Relu", "Expand", "Tile", "Reshape", "Gemm", "Conv", "Concat", "Cast", "Range", "Foo", "Identity"]


def seeds() -> list[onnx.ModelProto]:
    """Two small valid models: a dense layer with a shape chain, and a convolution block."""
    rng = np.random.default_rng(0)
    mlp = h.make_graph(
        [h.make_node("Shape", ["x"], ["s"], name="shape"),
         h.make_node("Gemm", ["x", "w", "b"], ["g"], name="gemm", transB=1),
         h.make_node("Relu", ["g"], ["r"], name="relu"),
         h.make_node("ConstantOfShape", ["k"], ["c"], name="cos", value=nh.from_array(np.ones(1, np.float32))),
         h.make_node("Expand", ["c", "s2"], ["e"], name="expand"),
         h.make_node("Add", ["r", "e"], ["y"], name="add")],
        "mlp", [h.make_tensor_value_info("x", T.FLOAT, [1, 8])], [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
        [nh.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w"),
         nh.from_array(rng.standard_normal(4).astype(np.float32), "b"),
         nh.from_array(np.array([4], np.int64), "k"), nh.from_array(np.array([1, 4], np.int64), "s2")])
    conv = h.make_graph(
        [h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
         h.make_node("Relu", ["c"], ["r"], name="relu"),
         h.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node("Reshape", ["p", "shape"], ["y"], name="flat")],
        "conv", [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 4])], [h.make_tensor_value_info("y", T.FLOAT, [1, 16])],
        [nh.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
         nh.from_array(np.array([1, -1], np.int64), "shape")])
    return [h.make_model(g, opset_imports=[h.make_opsetid("", 17)]) for g in (mlp, conv)]


SEEDS = seeds()


def mutate(model: onnx.ModelProto, draw) -> None:
    """One edit of one field of `model`, chosen by `draw` (a hypothesis data object)."""
    g = model.graph
    kind = draw(st.sampled_from(["dim", "init_dim", "attr", "dtype", "init_dtype", "input", "op", "opset",
                                 "bytes", "external", "drop"]))
    if kind == "dim":
        vi = draw(st.sampled_from(list(g.input) + list(g.output)))
        dims = vi.type.tensor_type.shape.dim
        if dims:
            dims[draw(st.integers(0, len(dims) - 1))].dim_value = draw(st.sampled_from(DIMS))
    elif kind == "init_dim":
        t = draw(st.sampled_from(list(g.initializer)))
        if t.dims:
            t.dims[draw(st.integers(0, len(t.dims) - 1))] = draw(st.sampled_from(DIMS))
    elif kind == "attr":
        n = draw(st.sampled_from([n for n in g.node if n.attribute] or list(g.node)))
        for a in n.attribute[:1]:
            if a.type == onnx.AttributeProto.INTS and a.ints:
                a.ints[draw(st.integers(0, len(a.ints) - 1))] = draw(st.sampled_from(DIMS))
            elif a.type == onnx.AttributeProto.INT:
                a.i = draw(st.sampled_from(DIMS))
            elif a.type == onnx.AttributeProto.TENSOR:
                a.t.data_type = draw(st.sampled_from(TYPES))
    elif kind == "dtype":
        vi = draw(st.sampled_from(list(g.input)))
        vi.type.tensor_type.elem_type = draw(st.sampled_from(TYPES))
    elif kind == "init_dtype":
        draw(st.sampled_from(list(g.initializer))).data_type = draw(st.sampled_from(TYPES))
    elif kind == "input":
        n = draw(st.sampled_from(list(g.node)))
        names = [t.name for t in g.initializer] + [o for m in g.node for o in m.output] + ["nowhere", ""]
        if n.input:
            n.input[draw(st.integers(0, len(n.input) - 1))] = draw(st.sampled_from(names))
    elif kind == "op":
        draw(st.sampled_from(list(g.node))).op_type = draw(st.sampled_from(OPS))
    elif kind == "opset":
        model.opset_import[0].version = draw(st.sampled_from([1, 6, 7, 13, 17, 21, 99, -1]))
    elif kind == "bytes":
        t = draw(st.sampled_from(list(g.initializer)))
        data = t.raw_data or bytes(t.SerializeToString())
        t.ClearField("float_data")
        t.ClearField("int64_data")
        cut = draw(st.integers(0, len(data)))
        t.raw_data = bytes(data[:cut]) + draw(st.binary(max_size=16))
    elif kind == "external":
        t = draw(st.sampled_from(list(g.initializer)))
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.data_location = T.EXTERNAL
        t.external_data.add(key="location", value=draw(st.sampled_from(
            ["data.bin", "../outside.bin", "/etc/hostname", "link.bin", "", "sub/../data.bin", "nothere.bin", "."])))
        for key in draw(st.sets(st.sampled_from(["offset", "length"]))):
            t.external_data.add(key=key, value=draw(st.sampled_from(["0", "4", "-4", "x", str(1 << 40), "64"])))
    elif kind == "drop" and len(g.node) > 1:
        del g.node[draw(st.integers(0, len(g.node) - 1))]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A model folder with a data file and a symbolic link leading out of it."""
    root = tmp_path_factory.mktemp("fuzz_onnx")
    (root / "outside.bin").write_bytes(bytes(range(256)) * 4)
    folder = root / "model"
    folder.mkdir()
    (folder / "data.bin").write_bytes(np.arange(256, dtype=np.float32).tobytes())
    os.symlink(root / "outside.bin", folder / "link.bin")
    return folder


@FUZZ
@given(data=st.data(), seed=st.integers(0, len(SEEDS) - 1), edits=st.integers(1, 3))
def test_mutated_models_import_or_fail_with_one_vta_error(folder, data, seed, edits):
    model = onnx.ModelProto()
    model.CopyFrom(SEEDS[seed])
    for _ in range(edits):
        mutate(model, data.draw)
    blob = bytearray(model.SerializeToString())
    for _ in range(data.draw(st.integers(0, 2))):  # and now and then a byte of the file itself
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    path = folder / "model.onnx"
    path.write_bytes(bytes(blob))
    with use_limits(tensor_mb=16, model_mb=64), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            optimize(import_onnx(str(path)))
        except VtaError as e:
            message = str(e)
            assert "\n" not in message and len(message) < 1000, message


def test_the_seeds_are_valid():
    for model in SEEDS:
        optimize(import_onnx(model))
