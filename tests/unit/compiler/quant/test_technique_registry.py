"""The quantization techniques' registry (compiler/quant/techniques/registry.py): a technique is one module
that registers itself.  A toy technique (tests/support/toy_technique.py) registered by importing it is a
QuantOptions field, a compile keyword and a command-line flag, and quantization applies it, with no other
edit; taken back, it is gone from all of them."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from vtakit.cli import build_parser, main
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.options import CHOICES, QUANT_OPTIONS, CompileOptions, QuantOptions
from vtakit.compiler.pipeline import compile_module, optimize
from vtakit.compiler.quant.int8 import float_and_int8
from vtakit.compiler.quant.techniques.registry import TECHNIQUES, Stage, Technique, in_stage, register, unregister
from vtakit.errors import CompileError

TOY = "tests.support.toy_technique"


@pytest.fixture
def toy():
    """The toy technique's module, freshly imported (that registers it); unregistered afterwards."""
    sys.modules.pop(TOY, None)
    module = importlib.import_module(TOY)
    try:
        yield module
    finally:
        unregister("weight_clip")
        sys.modules.pop(TOY, None)


def _model(outlier: float = 40.0):
    """conv (one weight an outlier) -> relu -> 1x1 conv: the outlier sets the first conv's weight exponent."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 8, 3, 3)) * 0.1).astype(np.float32)
    w1[3, 2, 1, 1] = outlier * 0.1
    w2 = (rng.standard_normal((16, 16, 1, 1)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1], name="c1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="c2")]
    graph = helper.make_graph(nodes, "toy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _samples(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((1, 8, 8, 8)).astype(np.float32) for _ in range(count)]


def _weights(g, node: str) -> np.ndarray:
    return g.consts[next(n for n in g.nodes if n.name == node).inputs[1]]


def test_a_registered_technique_is_an_option_a_flag_and_applied(toy, tmp_path, capsys):
    mode = toy.WeightClipMode
    # a QuantOptions field and a compile keyword, checked like the built-in ones
    assert QuantOptions().weight_clip is mode.OFF and QuantOptions(weight_clip="on").weight_clip is mode.ON
    assert QuantOptions.of(weight_clip="on") == QuantOptions(weight_clip=mode.ON) != QuantOptions()
    assert CompileOptions.of(weight_clip="on").quant.weight_clip is mode.ON
    assert QuantOptions(weight_clip="on").values()["weight_clip"] is mode.ON
    with pytest.raises(CompileError, match=r"^unknown weight_clip 'maybe'; use one of off, on$"):
        QuantOptions(weight_clip="maybe")
    assert TECHNIQUES["weight_clip"] in in_stage(Stage.FLOAT) and CHOICES["weight_clip"] is mode

    # applied: the float graph the int8 one is quantized from has the clipped weights
    g = optimize(import_onnx(_model()))
    samples = _samples(4)
    before = _weights(g, "c1")
    plain = dict(range_scale="off", bias_correction=False)  # no other technique touches the weights
    clipped, _, _ = float_and_int8(g, samples, weight_clip="on", **plain)
    kept, _, _ = float_and_int8(g, samples, **plain)
    bound = toy.SIGMAS * float(np.std(before))
    assert np.abs(before).max() > bound and np.abs(_weights(clipped, "c1")).max() <= bound
    assert np.array_equal(_weights(kept, "c1"), before)

    # compile_module (and so vtakit.compile): other int8 weights, and the accelerator agrees with the host
    on = compile_module(_model(), "pynq", calibrate=samples, weight_clip="on", calibration="max")
    off = compile_module(_model(), "pynq", calibrate=samples, calibration="max")
    assert on.consts.keys() == off.consts.keys()
    assert any(not np.array_equal(on.consts[k], off.consts[k]) for k in on.consts)
    assert np.array_equal(on.run(samples[0], device="cpu")["y"], on.run(samples[0], device="fsim")["y"])

    # a flag of `compile` and `report --accuracy`, with its choices and help
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("compile", "report"):
        flag = next(a for a in sub[command]._actions if "--weight-clip" in a.option_strings)
        assert tuple(flag.choices) == ("off", "on") and "4 standard deviations" in flag.help
    import onnx

    onnx.save(_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", np.stack(samples))
    assert main(["compile", str(tmp_path / "m.onnx"), "--config", "pynq", "--calibrate", str(tmp_path / "cal.npy"),
                 "--weight-clip", "on", "--calibration", "max", "-o", str(tmp_path / "m.vtamod")]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "m.vtamod"), "--weight-clip", "on"]) == 1  # only with --accuracy
    assert "--weight-clip only apply with --accuracy" in capsys.readouterr().err


def test_taken_back_it_is_gone(toy):
    unregister("weight_clip")
    assert "weight_clip" not in QUANT_OPTIONS and "weight_clip" not in TECHNIQUES and "weight_clip" not in CHOICES
    with pytest.raises(CompileError, match="unknown quantization option 'weight_clip'"):
        QuantOptions(weight_clip="on")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    assert not any("--weight-clip" in a.option_strings for a in sub["compile"]._actions)


def test_registration_mistakes_are_one_error(toy):
    with pytest.raises(CompileError, match="'weight_clip' is registered already"):
        register(Technique("weight_clip", Stage.FLOAT, toy.weight_clip_stage))
    for taken in ("seed", "target", "equalize"):
        option = type(toy.TECHNIQUE.option)(taken, toy.WeightClipMode, "off", help="")
        with pytest.raises(CompileError, match=f"option '{taken}' is taken"):
            register(Technique(f"toy_{taken}", Stage.FLOAT, toy.weight_clip_stage, option))
        assert f"toy_{taken}" not in TECHNIQUES
    with pytest.raises(CompileError, match="names the graph note"):
        register(Technique("toy_mark", Stage.MARK, toy.weight_clip_stage))
    with pytest.raises(CompileError, match="built in"):
        from vtakit.compiler.options import unregister_option

        unregister_option("equalize")


def test_the_built_in_techniques_run_in_their_order():
    """Range scaling before channel fill before GPTQ rounding, equalization first, the wide residual note per
    recipe: the order weights_for_int8 had when it called them by hand."""
    assert [t.name for t in in_stage(Stage.FLOAT)] == ["equalize"]
    assert [t.name for t in in_stage(Stage.WEIGHTS)] == ["range_scale", "channel_fill", "weight_rounding"]
    assert [t.name for t in in_stage(Stage.MARK)] == ["wide_residual"]
