"""`vtakit report MODEL --accuracy`: int8 against float per layer, --keep-float, and the library behind it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from vtakit.cli import main
from vtakit.compiler import zoo
from vtakit.compiler.quant.accuracy import accuracy_report, compare
from vtakit.compiler.pipeline import compile_module, optimize
from vtakit.compiler.quant.int8 import float_and_int8
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.errors import CompileError


def _digits(tmp_path):
    from sklearn.datasets import load_digits

    x = (load_digits().images / 16.0).astype(np.float32)[:, None, None]  # (N, 1, 1, 8, 8)
    model = tmp_path / "digits.onnx"
    onnx.save(zoo.build("digits_cnn"), model)
    np.save(tmp_path / "cal.npy", x[:16])
    np.save(tmp_path / "x.npy", x[100])
    return model, x


def test_report_accuracy_prints_every_int8_layer_and_writes_the_plot(tmp_path, capsys):
    model, _ = _digits(tmp_path)
    png = tmp_path / "acc.png"
    assert main(["report", str(model), "--accuracy", "--calibrate", str(tmp_path / "cal.npy"), "--input",
                 str(tmp_path / "x.npy"), "--plot", str(png), "--keep-float", "conv2", "--calibration", "kl"]) == 0
    text = capsys.readouterr().out
    for node in ("conv1", "conv3", "fc"):
        assert f"│ {node} " in text
    assert "│ conv2 " not in text  # kept in float: nothing to compare
    assert "SQNR" in text and "output logits" in text and "calibration kl" in text and png.stat().st_size > 0


def test_report_accuracy_follows_the_configs_requantization(tmp_path, capsys):
    """--config picks the requantization compile_module would (multipliers on pynq_mul, whose int8 graph
    then carries them); a multiplier on a config without MUL is one clear error."""
    model, _ = _digits(tmp_path)
    args = ["report", str(model), "--accuracy", "--calibrate", str(tmp_path / "cal.npy"), "--input",
            str(tmp_path / "x.npy")]
    assert main(args + ["--config", "pynq_mul"]) == 0
    text = capsys.readouterr().out
    assert "requantization multiplier (pynq_mul)" in text and "range scaling:" in text and "│ fc " in text
    assert main(args) == 0
    assert "requantization pow2 (pynq)" in capsys.readouterr().out
    assert main(args + ["--requant", "multiplier"]) != 0
    err = capsys.readouterr()
    assert "needs the ALU MUL extension" in err.out + err.err


def test_layer_figures_match_a_direct_comparison(tmp_path):
    model, x = _digits(tmp_path)
    g = optimize(import_onnx(str(model), bind={"": (1, 1, 8, 8)}))
    fg, qg, notes = float_and_int8(g, list(x[:16]), calibration="percentile")
    assert notes.method == "percentile" and not notes.synthetic
    rep = accuracy_report(fg, qg, {"data": x[100]})
    by_node = {r.node: r for r in rep.layers}
    assert {"conv1", "conv2", "conv3", "fc"} <= set(by_node)
    assert by_node["fc"].dtype == "int32" and by_node["conv1"].dtype == "int8"
    assert all(0.0 <= r.clipped <= 1.0 and r.cosine > 0.99 for r in rep.layers)
    sqnr, cos = rep.outputs["logits"]
    assert sqnr > 20 and cos > 0.99
    assert compare(np.ones(4), np.ones(4)) == (float("inf"), 1.0)
    assert compare(np.array([1.0, 0.0]), np.array([1.0, 0.1]))[0] == pytest.approx(20.0)


def test_keep_float_leaves_the_node_in_float_and_unknown_names_are_an_error(tmp_path):
    model, x = _digits(tmp_path)
    g = optimize(import_onnx(str(model), bind={"": (1, 1, 8, 8)}))
    _, qg, _ = float_and_int8(g, list(x[:8]), keep_float=("conv2",))
    assert qg.node("conv2").op == "Conv" and qg.node("conv1").op == "QConv"
    with pytest.raises(CompileError, match="keep_float names no node of the optimized graph: nosuch"):
        compile_module(str(model), "pynq", calibrate=list(x[:8]), keep_float=("nosuch",))
