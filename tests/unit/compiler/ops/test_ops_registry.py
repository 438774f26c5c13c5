"""The op registry and what it brought: one definition per op, opsets 7 to the newest, shape chains
folded at import, symbolic batch binding, parameters as graph inputs, generic host ops named in the
report, and one-line errors naming the node for bad attributes and unsupported modes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.frontend.onnx_import import OPSETS, PRECISION, SUPPORTED, import_onnx
from vtakit.compiler.ops import IMPORTS, OPS, onnx_def, op_def
from vtakit.errors import CompileError

vi = helper.make_tensor_value_info
c = numpy_helper.from_array


def _model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_cpu(model, feeds, **kw):
    module = vtakit.compile(model, target="cpu", **kw)
    return module, module.run(feeds, device="cpu")


def test_every_definition_is_complete():
    assert OPSETS.start == 7 and OPSETS.stop - 1 == onnx.defs.onnx_opset_version()
    for name, d in OPS.items():
        assert d.name == name and callable(d.infer) and callable(d.run)
        assert d.kernel in ("llvmlite", "numpy", "onnx.reference")
    for onnx_op, d in IMPORTS.items():
        assert d.convert is not None and onnx_def(onnx_op) is d
        assert onnx_op in PRECISION and onnx_op in SUPPORTED
    for op in ("Sum", "Dropout", "LRN", "Unsqueeze", "Resize", "ConvTranspose", "Sigmoid", "HardSwish",
               "LayerNormalization", "TopK", "Einsum", "Where", "Cast", "ArgMax", "ReduceMean"):
        assert op in IMPORTS, op
    assert onnx_def("Det") is not None and op_def("Det").kernel == "onnx.reference"  # taken generically
    assert onnx_def("NoSuchOp") is None


def test_shape_chain_folds_before_support_is_judged():
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])), the PyTorch flatten idiom."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("ConstantOfShape", ["n1"], ["ones"], value=c(np.array([1.0], np.float32))),
             helper.make_node("Reshape", ["x", "shape"], ["f"]),
             helper.make_node("Relu", ["f"], ["y"])]
    inits = [c(np.array(0, np.int64), "zero"), c(np.array([0], np.int64), "ax0"), c(np.array([-1], np.int64), "minus1")]
    m = _model(nodes, [vi("x", TensorProto.FLOAT, ["N", 2, 3])], [vi("y", TensorProto.FLOAT, ["N", 6])], inits)
    g = import_onnx(m, input_shapes={"x": (4, 2, 3)})
    assert [n.op for n in g.nodes] == ["Reshape", "Relu"] and g.tensors["y"].shape == (4, 6)
    x = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    _, out = _run_cpu(m, {"x": x}, input_shapes={"x": (4, 2, 3)})
    np.testing.assert_array_equal(out["y"], np.maximum(x.reshape(4, 6), 0))


def _block(opset: int):
    """The same network written at an old and a new opset (attributes that became inputs, Upsample vs
    Resize, axes and split sizes as inputs, Clip bounds as inputs)."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    bn = [c(rng.uniform(0.5, 1.5, 4).astype(np.float32), "g"), c(rng.standard_normal(4).astype(np.float32), "b"),
          c(rng.standard_normal(4).astype(np.float32) * 0.1, "m"), c(rng.uniform(0.5, 1.5, 4).astype(np.float32), "v")]
    inits = [c(w, "w"), *bn]
    new = opset >= 13
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]),
             helper.make_node("LRN", ["bn"], ["l"], size=3),
             helper.make_node("Dropout", ["l"], ["d"]),
             helper.make_node("Sum", ["d", "bn", "c"], ["s"])]
    if opset >= 11:
        inits += [c(np.array(-1.0, np.float32), "lo"), c(np.array(2.0, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["s", "lo", "hi"], ["r"]))
    else:
        nodes.append(helper.make_node("Clip", ["s"], ["r"], min=-1.0, max=2.0))
    if opset >= 11:
        inits.append(c(np.array([1, 1, 2, 2], np.float32), "scales"))
        nodes.append(helper.make_node("Resize", ["r", "", "scales"], ["u"], mode="nearest",
                                      coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
    else:
        inits.append(c(np.array([1, 1, 2, 2], np.float32), "scales"))
        nodes.append(helper.make_node("Upsample", ["r", "scales"], ["u"], mode="nearest"))
    if new:
        inits += [c(np.array([2, 2], np.int64), "split"), c(np.array([2, 3], np.int64), "axes")]
        nodes += [helper.make_node("Split", ["u", "split"], ["p", "q"], axis=1),
                  helper.make_node("Sub", ["p", "q"], ["pq"]),
                  helper.make_node("ReduceMean", ["pq", "axes"] if opset >= 18 else ["pq"], ["rm"], keepdims=1,
                                   **({} if opset >= 18 else {"axes": [2, 3]})),
                  helper.make_node("Squeeze", ["rm", "axes"], ["y"])]
    else:
        nodes += [helper.make_node("Split", ["u"], ["p", "q"], axis=1, split=[2, 2]),
                  helper.make_node("Sub", ["p", "q"], ["pq"]),
                  helper.make_node("ReduceMean", ["pq"], ["rm"], keepdims=1, axes=[2, 3]),
                  helper.make_node("Squeeze", ["rm"], ["y"], axes=[2, 3])]
    return _model(nodes, [vi("x", TensorProto.FLOAT, [1, 3, 6, 6])], [vi("y", TensorProto.FLOAT, [1, 2])], inits,
                  opset=opset)


def test_opset_27_and_opset_9_give_the_same_results():
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    newest = onnx.defs.onnx_opset_version()
    results = {}
    for opset in (9, 11, 13, 18, newest):
        _, out = _run_cpu(_block(opset), {"x": x})
        results[opset] = out["y"]
    import onnxruntime as ort

    want = ort.InferenceSession(_block(9).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for opset, y in results.items():
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5, err_msg=f"opset {opset}")


def test_opsets_below_7_import_as_7_unless_an_op_changed():
    x = np.array([[True, False]])
    m = _model([helper.make_node("Not", ["x"], ["y"])], [vi("x", TensorProto.BOOL, [1, 2])],
               [vi("y", TensorProto.BOOL, [1, 2])], opset=1)
    assert import_onnx(m).notes["opset"] == 7
    np.testing.assert_array_equal(_run_cpu(m, {"x": x})[1]["y"], ~x)
    bn = helper.make_node("BatchNormalization", ["x", "s", "s", "s", "s"], ["y"], is_test=1)
    m = _model([bn], [vi("x", TensorProto.FLOAT, [1, 2, 2, 2]), vi("s", TensorProto.FLOAT, [2])],
               [vi("y", TensorProto.FLOAT, [1, 2, 2, 2])], opset=6)
    with pytest.raises(CompileError, match="opset 6 is not supported: BatchNormalization changed by opset 7"):
        import_onnx(m)


def test_symbolic_batch_binds_from_the_first_calibration_sample_and_other_symbols_are_named():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, ["batch_size", 4])],
               [vi("y", TensorProto.FLOAT, ["batch_size", 4])])
    cal = [np.ones((3, 4), np.float32)] * 2
    module = vtakit.compile(m, "pynq", calibrate=cal)
    assert module.graph.tensors["x"].shape == (3, 4)
    m2 = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, ["N", "H"])],
                [vi("y", TensorProto.FLOAT, ["N", "H"])])
    with pytest.raises(CompileError, match=r"input 'x' has symbolic dimensions \(H\)"):
        import_onnx(m2)
    assert import_onnx(m2, input_shapes={"x": (2, 5)}).tensors["y"].shape == (2, 5)


def test_parameters_fed_as_graph_inputs_run_on_the_host():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "scale", "b", "m", "v"], ["y"])]
    inits = [c(np.zeros(2, np.float32), "b"), c(np.zeros(2, np.float32), "m"), c(np.ones(2, np.float32), "v")]
    m = _model(nodes, [vi("x", TensorProto.FLOAT, [1, 3, 5, 5]), vi("w", TensorProto.FLOAT, [2, 3, 3, 3]),
                       vi("scale", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, [1, 2, 3, 3])], inits)
    feeds = {"x": rng.standard_normal((1, 3, 5, 5)).astype(np.float32),
             "w": rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "scale": np.array([2.0, -1.0], np.float32)}
    _, out = _run_cpu(m, feeds)
    import onnxruntime as ort

    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-5)


def test_ops_without_kernels_run_and_the_report_names_them():
    nodes = [helper.make_node("LRN", ["x"], ["l"], size=3), helper.make_node("Hardmax", ["l"], ["h"], axis=1),
             helper.make_node("Add", ["h", "l"], ["y"])]
    m = _model(nodes, [vi("x", TensorProto.FLOAT, [1, 4, 2, 2])], [vi("y", TensorProto.FLOAT, [1, 4, 2, 2])])
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 2)).astype(np.float32)
    module, out = _run_cpu(m, {"x": x})
    import onnxruntime as ort

    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)
    line = [s for s in module.report().summary_lines() if s.startswith("host ops without")]
    assert line == ["host ops without an llvmlite kernel: Hardmax x1 (onnx.reference), LRN x1 (numpy)"]


BAD = [
    (helper.make_node("Resize", ["x", "", "sc"], ["y"], name="rs", mode="bicubic"), "Resize mode 'bicubic'"),
    (helper.make_node("Resize", ["x", "", "sc"], ["y"], name="rs", coordinate_transformation_mode="warp"),
     "coordinate_transformation_mode 'warp'"),
    (helper.make_node("LRN", ["x"], ["y"], name="lrn"), "LRN needs a positive size"),
    (helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode="mirror"), "Pad mode 'mirror'"),
    (helper.make_node("Range", ["x0", "x1", "x0"], ["y"], name="range"), "depends on the values of 'x0', 'x1'"),
    (helper.make_node("TopK", ["x", "k"], ["y", "i"], name="topk", axis=7), "topk"),
]


@pytest.mark.parametrize("node,msg", BAD, ids=[b[0].name + "-" + b[1][:12] for b in BAD])
def test_bad_attributes_and_modes_are_one_line_naming_the_node(node, msg):
    inits = [c(np.array([1, 1, 2, 2], np.float32), "sc"), c(np.zeros(8, np.int64), "pads"),
             c(np.ones((2, 2, 3, 3), np.float32), "wt"), c(np.array([1], np.int64), "k")]
    inputs = [vi("x", TensorProto.FLOAT, [1, 2, 2, 2])] + [vi(s, TensorProto.FLOAT, []) for s in ("x0", "x1")]
    m = _model([node], inputs, [vi("y", TensorProto.FLOAT, None)], inits, opset=19)
    with pytest.raises(CompileError, match=msg) as e:
        import_onnx(m)
    assert "\n" not in str(e.value) and e.value.node == node.name


def test_every_op_the_accelerator_may_take_has_its_lowering_in_the_registry():
    """compiler.passes.lower has no per-op branches: an op with a placement rule brings its `lower` rule."""
    import inspect

    from vtakit.compiler.passes import lower
    from vtakit.compiler.ops import OPS

    takers = {name for name, d in OPS.items() if d.accel is not None}
    assert takers == {name for name, d in OPS.items() if d.lower is not None}
    assert {"QConv", "QDense", "QAdd", "Relu", "MaxPool"} <= takers
    source = inspect.getsource(lower.lower_node)
    assert not any(f'"{name}"' in source for name in takers)


EINSUMS = [("bij,bjk->bik", (2, 3, 4), (2, 4, 5), True), ("bhqd,bhkd->bhqk", (1, 2, 3, 4), (1, 2, 5, 4), True),
           ("...ij,...jk->...ik", (2, 2, 3, 4), (4, 5), True), ("ij,kj->ki", (3, 4), (5, 4), True),
           ("ii,ij->ij", (3, 3), (3, 4), False), ("bij,bjk->bk", (2, 3, 4), (2, 4, 5), False)]


@pytest.mark.parametrize("eq,sa,sb,matmul", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_that_is_a_matmul_imports_as_matmul(eq, sa, sb, matmul):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    want = np.einsum(eq, a, b)
    m = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=eq)],
               [vi("a", TensorProto.FLOAT, list(sa)), vi("b", TensorProto.FLOAT, list(sb))],
               [vi("y", TensorProto.FLOAT, list(want.shape))], opset=12)
    ops = [n.op for n in import_onnx(m).nodes]
    assert ("MatMul" in ops and "Einsum" not in ops) if matmul else ops == ["Einsum"]
    np.testing.assert_allclose(_run_cpu(m, {"a": a, "b": b})[1]["y"], want, rtol=1e-5, atol=1e-5)


def test_einsum_by_constant_weights_becomes_dense_for_the_int8_path():
    from vtakit.compiler.pipeline import optimize

    w = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    m = _model([helper.make_node("Einsum", ["x", "w"], ["y"], equation="nc,kc->nk")],
               [vi("x", TensorProto.FLOAT, [2, 4])], [vi("y", TensorProto.FLOAT, [2, 5])], [c(w, "w")], opset=12)
    assert [n.op for n in optimize(import_onnx(m)).nodes] == ["Dense"]


def test_the_quantizer_and_folds_read_int8_rules_from_the_registry():
    """Which ops rescale in int8 (and into which quantized op) is each definition's `int8_op`/`int8_rule`;
    quantize.py and fold.py name none of them."""
    import inspect

    from vtakit.compiler.passes import fold
    from vtakit.compiler.quant import quantize

    rules = {name: (d.int8_op, d.int8_rule) for name, d in OPS.items() if d.int8_rule}
    assert rules == {"Conv": ("QConv", "weights"), "Dense": ("QDense", "weights"), "Add": ("QAdd", "sum"),
                     "ActDense": ("QActDense", "product")}
    assert all(OPS[op].precision is None for op, _ in rules.values())
    for module in (quantize, fold):
        source = inspect.getsource(module)
        assert not any(s in source for s in ('"QConv"', '"QDense"', '"QAdd"', '"QActDense"', '("Conv", "Dense")',
                                             'op == "Add"'))


@pytest.mark.parametrize("op", ["NonZero", "Unique"])
def test_value_dependent_output_shapes_are_refused(op):
    """Shapes are fixed at compile time: an op whose output shape follows the values fed at run time
    is one error naming the node, not the shape zeros happen to give."""
    node = onnx.helper.make_node(op, ["x"], ["y"], name="vals")
    graph = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT if op == "Unique"
                                                                       else onnx.TensorProto.INT64, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match="vals.*output shape depends on the values of 'x'"):
        vtakit.compile(model, target="cpu")
