"""Hostile and broken ONNX files (issue 37 causes 3, 4 and the ONNX part of 13): external data stays in
the model's folder, what a model can make the compiler allocate is capped, ONNX type rules hold."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from vtakit.cli import main
from vtakit.compiler.frontend import limits
from vtakit.compiler.frontend.limits import use_limits
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.ops.onnx_reference import attrs_to_ir
from vtakit.errors import CompileError

W = np.arange(12, dtype=np.float32).reshape(3, 4)


def matmul_model(w: np.ndarray = W, opset: int = 17) -> onnx.ModelProto:
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, w.shape[0]])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, w.shape[1]])], [nh.from_array(w, "w")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def save_external(folder, w: np.ndarray = W) -> str:
    """model.onnx + model.onnx.data, as torch.onnx.export writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / "model.onnx")
    onnx.save_model(matmul_model(w), path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    return path


def set_external(model: onnx.ModelProto, **entries) -> onnx.ModelProto:
    """Point initializer 'w' at external data (location, offset, length) without writing it."""
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = T.EXTERNAL
    del t.external_data[:]
    for k, v in entries.items():
        t.external_data.add(key=k, value=str(v))
    return model


def write(model: onnx.ModelProto, path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return str(path)


# ------------------------------------------------------------------------------ external data
def test_external_data_is_read_from_the_models_folder_not_the_cwd(tmp_path, monkeypatch):
    path = save_external(tmp_path / "model")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.onnx.data").write_bytes(np.full(12, 7, np.float32).tobytes())  # a decoy in the cwd
    monkeypatch.chdir(elsewhere)
    g = import_onnx(path)
    np.testing.assert_array_equal(g.consts["w"], W)


def test_a_legitimate_external_data_model_compiles_from_another_folder(tmp_path, monkeypatch):
    from vtakit.compiler.pipeline import compile_module

    path = save_external(tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    module = compile_module(path, target="cpu")
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(next(iter(module.run({"x": x}).values())), x @ W)


@pytest.mark.parametrize("location, why", [
    ("../secret.bin", "leaves the model's folder"),
    ("sub/../../secret.bin", "leaves the model's folder"),
    ("ABS", "absolute path"),
    ("link.bin", "resolves outside the model's folder"),
    ("", "without a location"),
    ("missing.bin", "cannot read external data file"),
])
def test_external_data_outside_the_folder_is_refused(tmp_path, location, why):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    os.symlink(secret, folder / "link.bin")
    location = str(secret) if location == "ABS" else location
    path = write(set_external(matmul_model(), location=location), folder / "model.onnx")
    with pytest.raises(CompileError, match=why) as e:
        import_onnx(path)
    assert "initializer 'w'" in str(e.value) and "\n" not in str(e.value)


def test_a_symlink_inside_the_folder_is_fine(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "real.bin").write_bytes(W.tobytes())
    os.symlink("real.bin", folder / "link.bin")
    g = import_onnx(write(set_external(matmul_model(), location="link.bin"), folder / "model.onnx"))
    np.testing.assert_array_equal(g.consts["w"], W)


def test_a_sparse_gigabyte_is_never_read(tmp_path):
    """A small model pointing at a 1 GiB sparse file: offsets and lengths are checked against the file's
    size and the tensor's shape before anything is read."""
    folder = tmp_path / "model"
    folder.mkdir()
    with open(folder / "big.bin", "wb") as f:
        f.truncate(1 << 30)
    cases = [
        (dict(location="big.bin"), "does not match its shape"),                      # length defaults to the file
        (dict(location="big.bin", length=1 << 30), "does not match its shape"),
        (dict(location="big.bin", offset=(1 << 30) - 8, length=48), "beyond the end"),
        (dict(location="big.bin", offset=-1, length=48), "negative"),
        (dict(location="big.bin", offset="x", length=48), "not integers"),
    ]
    tracemalloc.start()
    try:
        for entries, why in cases:
            with pytest.raises(CompileError, match=why):
                import_onnx(write(set_external(matmul_model(), **entries), folder / "model.onnx"))
        huge = matmul_model()
        huge.graph.initializer[0].dims[:] = [1 << 15, 1 << 14]  # 2 GiB of float32, declared
        with pytest.raises(CompileError, match="limit per tensor"):
            import_onnx(write(set_external(huge, location="big.bin"), folder / "model.onnx"))
        assert tracemalloc.get_traced_memory()[1] < 64 << 20
    finally:
        tracemalloc.stop()


def test_external_data_without_a_folder_is_one_clear_error(tmp_path):
    path = save_external(tmp_path / "model")
    proto = onnx.load(path, load_external_data=False)
    for source in (proto, proto.SerializeToString()):
        with pytest.raises(CompileError, match="came without its folder"):
            import_onnx(source)
    np.testing.assert_array_equal(import_onnx(onnx.load(path)).consts["w"], W)  # loaded with its data: fine


def test_the_reference_evaluator_never_resolves_external_data(tmp_path, monkeypatch):
    (tmp_path / "w.bin").write_bytes(W.tobytes())
    monkeypatch.chdir(tmp_path)
    t = nh.from_array(W, "v")
    t.ClearField("raw_data")
    t.data_location = T.EXTERNAL
    t.external_data.add(key="location", value="w.bin")
    node = h.make_node("Constant", [], ["c"], value=t)
    with pytest.raises(CompileError, match="external file"):
        attrs_to_ir(node)


# ---------------------------------------------------------------------------------- limits
def expand_model(shape, op: str = "Expand") -> onnx.ModelProto:
    """~200 bytes that fold into a tensor of `shape`."""
    shape_t = nh.from_array(np.array(shape, np.int64), "s")
    if op == "Expand":
        nodes, inits = [h.make_node("Expand", ["one", "s"], ["big"], name="grow")], \
            [nh.from_array(np.ones(1, np.float32), "one"), shape_t]
    elif op == "Tile":
        nodes, inits = [h.make_node("Tile", ["one", "s"], ["big"], name="grow")], \
            [nh.from_array(np.ones([1] * len(shape), np.float32), "one"), shape_t]
    elif op == "ConstantOfShape":
        nodes, inits = [h.make_node("ConstantOfShape", ["s"], ["big"], name="grow")], [shape_t]
    else:  # Range over [0, prod(shape))
        nodes = [h.make_node("Range", ["a", "b", "d"], ["big"], name="grow")]
        inits = [nh.from_array(np.array(v, np.float32), k) for k, v in
                 (("a", 0), ("b", float(np.prod(shape, dtype=np.float64))), ("d", 1))]
    nodes.append(h.make_node("ReduceSum", ["big"], ["y"], name="sum", keepdims=0))
    g = h.make_graph(nodes, "g", [], [h.make_tensor_value_info("y", T.FLOAT, [])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Expand", "Tile", "ConstantOfShape", "Range"])
def test_folding_checks_the_output_size_before_evaluating(op):
    model = expand_model([100000, 100000], op)
    assert model.ByteSize() < 250
    tracemalloc.start()
    try:
        with pytest.raises(CompileError, match="limit per tensor") as e:
            import_onnx(model)
        assert tracemalloc.get_traced_memory()[1] < 64 << 20
    finally:
        tracemalloc.stop()
    assert "'grow'" in str(e.value) and "10,000,000,000 elements" in str(e.value)


def test_the_tensor_limit_can_be_raised_and_lowered():
    model = expand_model([512, 512])  # 1 MiB of float32
    assert import_onnx(model).consts["big"].shape == (512, 512)
    with use_limits(tensor_mb=0.5):
        with pytest.raises(CompileError, match="512.0 KiB limit per tensor"):
            import_onnx(model)
    assert limits.LIMITS.tensor_bytes == limits.Limits().tensor_bytes  # restored after the block
    with use_limits(tensor_mb=20000), pytest.raises(CompileError, match="limit per tensor"):
        import_onnx(expand_model([1 << 40]))


def test_the_model_limit_counts_every_folded_constant():
    nodes = [h.make_node("Expand", ["one", "s"], [f"big{i}"], name=f"grow{i}") for i in range(8)]
    nodes.append(h.make_node("Sum", [f"big{i}" for i in range(8)], ["y"], name="sum"))
    g = h.make_graph(nodes, "g", [], [h.make_tensor_value_info("y", T.FLOAT, [1024, 1024])],
                     [nh.from_array(np.ones(1, np.float32), "one"), nh.from_array(np.array([1024, 1024]), "s")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with use_limits(model_mb=10), pytest.raises(CompileError, match="over the 10.0 MiB limit per model") as e:
        import_onnx(model)
    assert "grow" in str(e.value)


def test_declared_input_shapes_are_checked_before_calibration_allocates_them():
    from vtakit.compiler.pipeline import compile_module

    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="r")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1 << 20, 1 << 20])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1 << 20, 1 << 20])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(CompileError, match=r"input 'x' of shape \(1048576, 1048576\).*4096.0 GiB"):
        compile_module(model)
    sym = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                                    [h.make_tensor_value_info("x", T.FLOAT, ["n", 8])],
                                    [h.make_tensor_value_info("y", T.FLOAT, ["n", 8])]),
                       opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(CompileError, match="input 'x'"):
        import_onnx(sym, input_shapes={"x": (1 << 40, 8)})


def test_an_initializer_declaring_more_than_it_holds_is_one_line():
    model = matmul_model()
    model.graph.initializer[0].dims[:] = [1 << 30, 1 << 30]
    with pytest.raises(CompileError, match="initializer 'w'.*limit per tensor"):
        import_onnx(model.SerializeToString())
    model.graph.initializer[0].dims[:] = [30, 4]
    with pytest.raises(CompileError, match="initializer 'w' cannot be read"):
        import_onnx(model)


def test_the_model_file_must_be_a_regular_file_of_bounded_size(tmp_path):
    with pytest.raises(CompileError, match="not a regular file"):
        import_onnx("/dev/zero")
    with pytest.raises(CompileError, match="not a regular file"):
        import_onnx(str(tmp_path))
    path = write(matmul_model(np.zeros((256, 256), np.float32)), tmp_path / "m.onnx")
    with use_limits(model_mb=0.125), pytest.raises(CompileError, match="256.1 KiB, over the 128.0 KiB limit per model"):
        import_onnx(path)


# ----------------------------------------------------------------------------------- types
def binary_model(op: str, a: int, b: int) -> onnx.ModelProto:
    g = h.make_graph([h.make_node(op, ["a", "b"], ["y"], name="mix")], "g",
                     [h.make_tensor_value_info("a", a, [2, 3]), h.make_tensor_value_info("b", b, [2, 3])],
                     [h.make_tensor_value_info("y", a, [2, 3])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Sub"])
def test_inputs_sharing_a_type_parameter_must_agree(op):
    with pytest.raises(CompileError, match=r"node 'mix' \(" + op + r"\): inputs 'a' and 'b' must have the same"):
        import_onnx(binary_model(op, T.FLOAT, T.INT64))
    assert import_onnx(binary_model(op, T.FLOAT, T.FLOAT)).tensors["y"].dtype == "float32"


def test_a_type_outside_the_allowed_set_is_refused():
    g = h.make_graph([h.make_node("Sqrt", ["a"], ["y"], name="root")], "g",
                     [h.make_tensor_value_info("a", T.INT64, [4])], [h.make_tensor_value_info("y", T.INT64, [4])])
    with pytest.raises(CompileError, match=r"node 'root' \(Sqrt\): input 'a' \(X\) is int64; the schema allows"):
        import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))


def test_a_folded_node_is_type_checked_too():
    g = h.make_graph([h.make_node("Add", ["a", "b"], ["c"], name="mix"), h.make_node("Add", ["x", "c"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.DOUBLE, [2])], [h.make_tensor_value_info("y", T.DOUBLE, [2])],
                     [nh.from_array(np.ones(2, np.float32), "a"), nh.from_array(np.ones(2, np.int64), "b")])
    with pytest.raises(CompileError, match="node 'mix'.*same element type"):
        import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))


# ------------------------------------------------------------------------------------- CLI
def hostile_files(tmp_path) -> list[str]:
    folder = tmp_path / "hostile"
    folder.mkdir()
    with open(folder / "big.bin", "wb") as f:
        f.truncate(1 << 30)
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    return [
        "/dev/zero",
        write(set_external(matmul_model(), location="../secret.bin"), folder / "escape.onnx"),
        write(set_external(matmul_model(), location="big.bin"), folder / "sparse.onnx"),
        write(expand_model([100000, 100000]), folder / "expand.onnx"),
        write(binary_model("Add", T.FLOAT, T.INT64), folder / "types.onnx"),
    ]


def test_cli_compile_of_hostile_files_is_one_error_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for path in hostile_files(tmp_path):
        assert main(["compile", path, "--target", "cpu", "-o", str(tmp_path / "out.vtamod")]) == 1, path
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, (path, err)
    assert not (tmp_path / "out.vtamod").exists()


def test_cli_limit_flags(tmp_path, capsys):
    path = write(expand_model([512, 512]), tmp_path / "m.onnx")
    out = str(tmp_path / "m.vtamod")
    assert main(["compile", path, "--target", "cpu", "--max-tensor-mb", "0.5", "-o", out]) == 1
    assert "512.0 KiB limit per tensor" in capsys.readouterr().err
    assert main(["compile", path, "--target", "cpu", "-o", out]) == 0
    big = write(expand_model([1 << 15, 1 << 14]), tmp_path / "big.onnx")  # 2 GiB folded
    assert main(["compile", big, "--target", "cpu", "-o", out]) == 1
    assert "limit per tensor" in capsys.readouterr().err
    for bad in ("-1", "nan", "inf", "0"):
        assert main(["compile", path, "--target", "cpu", "--max-model-mb", bad, "-o", out]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: --max-model-mb must be a positive number") and err.count("\n") == 1


def test_types_follow_onnx_not_the_irs_compute_type():
    """The IR computes an int32 MatMul in float32; the int32 bias added to it is still valid ONNX."""
    g = h.make_graph([h.make_node("MatMul", ["a", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["y"], name="bias")],
                     "g", [h.make_tensor_value_info("a", T.INT32, [2, 3])], [h.make_tensor_value_info("y", T.INT32, [2, 4])],
                     [nh.from_array(np.ones((3, 4), np.int32), "w"), nh.from_array(np.ones(4, np.int32), "b")])
    import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))


def test_the_model_limit_counts_the_activations_alive_at_once():
    """Many tensors each under the per-tensor limit still add up when they are alive together (twelve
    1 MiB branches read by one Sum); a chain that frees each as it goes passes the same limit."""
    branches = [h.make_node("Relu", ["x"], [f"b{i}"], name=f"relu{i}") for i in range(12)]
    fan = h.make_graph(branches + [h.make_node("Sum", [f"b{i}" for i in range(12)], ["y"], name="sum")], "g",
                       [h.make_tensor_value_info("x", T.FLOAT, [512, 512])],
                       [h.make_tensor_value_info("y", T.FLOAT, [512, 512])])
    chain = h.make_graph([h.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu{i}") for i in range(12)], "g",
                         [h.make_tensor_value_info("t0", T.FLOAT, [512, 512])],
                         [h.make_tensor_value_info("t12", T.FLOAT, [512, 512])])
    fan_model, chain_model = (h.make_model(g, opset_imports=[h.make_opsetid("", 17)]) for g in (fan, chain))
    import_onnx(fan_model)
    with use_limits(model_mb=8):
        import_onnx(chain_model)
        with pytest.raises(CompileError, match=r"node 'relu7' \(Relu\): the activations alive after this node "
                                               r"\(8.0 MiB\) brings the model's tensors to 9.0 MiB, over the 8.0 MiB"):
            import_onnx(fan_model)


def test_a_folded_broadcast_is_checked_before_evaluating():
    g = h.make_graph([h.make_node("Add", ["col", "row"], ["big"], name="outer"),
                      h.make_node("ReduceSum", ["big"], ["y"], keepdims=0)], "g", [],
                     [h.make_tensor_value_info("y", T.FLOAT, [])],
                     [nh.from_array(np.ones((1 << 17, 1), np.float32), "col"),
                      nh.from_array(np.ones((1, 1 << 17), np.float32), "row")])
    with pytest.raises(CompileError, match=r"node 'outer' \(Add\): output 'big' of shape \(131072, 131072\)"):
        import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))


def test_names_that_are_not_utf8_are_one_line():
    """protobuf gives invalid UTF-8 string fields as bytes: the op lookup crashed with a TypeError."""
    blob = matmul_model().SerializeToString()
    for good, bad in ((b"MatMul", b"\x80atMul"), (b"mm", b"m\xff")):
        with pytest.raises(CompileError, match="not valid UTF-8"):
            import_onnx(blob.replace(good, bad))


def test_an_arithmetic_error_in_an_ops_import_is_one_line():
    """A zero stride made the convolution's shape rule divide by zero: a raw ZeroDivisionError."""
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["y"], name="conv", strides=[0, 1])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.ones((4, 2, 3, 3), np.float32), "w")])
    with pytest.raises(CompileError, match=r"node 'conv' \(Conv\).*ZeroDivisionError"):
        import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))


def test_broken_declarations_are_named(tmp_path):
    lie = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                                    [h.make_tensor_value_info("y", T.INT64, [1, 4])]), opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(CompileError, match="graph output 'y' is declared int64 but computed as float32"):
        import_onnx(lie)
    lie.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -3
    with pytest.raises(CompileError, match=r"input 'x' has symbolic dimensions \(-3\) beyond the batch"):
        import_onnx(lie)  # a negative dimension is dynamic (Paddle2ONNX writes -1): it must be given
    unknown = matmul_model()
    unknown.graph.initializer[0].data_type = 9999
    with pytest.raises(CompileError, match="initializer 'w' has an unknown element type 9999"):
        import_onnx(unknown)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "d.bin").write_bytes(W.tobytes())
    for entries, why in ((dict(location="d\0.bin"), "holds a NUL byte"),
                         (dict(location="d.bin", offset=1 << 40), "offset 1,099,511,627,776 lies beyond the end")):
        with pytest.raises(CompileError, match=why):
            import_onnx(write(set_external(matmul_model(), **entries), folder / "model.onnx"))


def test_folds_are_counted_against_the_model_before_they_are_evaluated(monkeypatch):
    """Each Expand is within the tensor limit; the second would pass the model's: it is never evaluated."""
    from vtakit.compiler.frontend import onnx_import

    model = expand_model([256, 256])
    grow2 = h.make_node("Expand", ["one", "s"], ["big2"], name="grow2")
    model.graph.node.insert(1, grow2)
    model.graph.node.append(h.make_node("ReduceSum", ["big2"], ["y2"], name="sum2", keepdims=0))
    model.graph.output.append(h.make_tensor_value_info("y2", T.FLOAT, []))
    evaluated = []
    real = onnx_import.evaluate
    monkeypatch.setattr(onnx_import, "evaluate", lambda op, *a: evaluated.append(op) or real(op, *a))
    with use_limits(tensor_mb=0.3, model_mb=0.4), \
            pytest.raises(CompileError, match=r"node 'grow2' \(Expand\): output 'big2' .*limit per model"):
        import_onnx(model)
    assert evaluated == ["Expand"]


def test_an_auto_pad_onnx_does_not_define_is_refused():
    """onnxruntime refuses it; it used to be read as NOTSET (a 5 MB value compiled with exit 0)."""
    conv = h.make_node("Conv", ["x", "w"], ["y"], name="conv", auto_pad="A" * 100_000)
    g = h.make_graph([conv], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.ones((4, 3, 3, 3), np.float32), "w")])
    with pytest.raises(CompileError, match=r"node 'conv' \(Conv\): .*auto_pad 'AAAA.*' is not one of NOTSET") as e:
        import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    assert len(str(e.value)) < 300


def test_a_rank_numpy_cannot_hold_is_one_error():
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1] * 2000)], [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(CompileError, match="input 'x' has 2000 dimensions"):
        import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
