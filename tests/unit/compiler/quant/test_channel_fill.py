"""Depthwise inputs the host quantizes, filled channel by channel (compiler.quant.techniques.channel_fill)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vtakit.compiler.quant.techniques import channel_fill
from vtakit.compiler.pipeline import compile_module
from vtakit.compiler.pipeline import optimize
from vtakit.compiler.quant.techniques.channel_fill import BALANCE_EXTRA_BITS, HEADROOM_BITS, MAX_BITS, ChannelFill, apply_channel_fill, balanced_bits, candidates, fill_bits, plan_channel_fill
from vtakit.compiler.quant.techniques.channel_scales import CHANNEL_SPREAD
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.frontend.onnx_import import import_onnx

C = 16
SPREAD = np.float32(2.0) ** -(np.arange(C) % 8).astype(np.float32)  # channel c spans 2**-(c % 8) of the largest


def _model(host_made: bool = True, dense: bool = False):
    """x -> (host: Mul by SPREAD per channel | accelerator: 1x1 conv) -> depthwise 3x3 (dense: a 3x3 conv
    16 -> 16 whose input columns undo the spread) -> relu -> 1x1 conv -> y."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(SPREAD.reshape(1, C, 1, 1), "spread"),
             # the depthwise weights undo the spread (as folded batch norms often do): its output channels are alike
             numpy_helper.from_array((rng.standard_normal((C, 1, 3, 3)) * 0.5 / SPREAD.reshape(C, 1, 1, 1)
                                      ).astype(np.float32), "wd"),
             numpy_helper.from_array((rng.standard_normal(C) * 0.01).astype(np.float32), "bd"),
             numpy_helper.from_array((rng.standard_normal((8, C, 1, 1)) * 0.3).astype(np.float32), "wp"),
             numpy_helper.from_array((rng.standard_normal((C, C, 3, 3)) * 0.1 / SPREAD.reshape(1, C, 1, 1)
                                      ).astype(np.float32), "wc"),
             numpy_helper.from_array((rng.standard_normal((C, C, 1, 1)) * 0.3).astype(np.float32), "w0")]
    first = (helper.make_node("Mul", ["x", "spread"], ["t"]) if host_made
             else helper.make_node("Conv", ["x", "w0"], ["t"]))
    nodes = [first,
             (helper.make_node("Conv", ["t", "wc", "bd"], ["d"], pads=[1, 1, 1, 1]) if dense else
              helper.make_node("Conv", ["t", "wd", "bd"], ["d"], group=C, pads=[1, 1, 1, 1])),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Conv", ["r", "wp"], ["y"])]
    graph = helper.make_graph(nodes, "fill", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _samples(n: int, seed: int) -> list[np.ndarray]:
    """Uniform in [-1, 1] with one 1.0 per channel: every channel of x peaks at exactly 1."""
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(-1, 1, (1, C, 12, 12)).astype(np.float32) for _ in range(n)]
    for x in xs:
        x[0, :, 5, 5] = 1.0
    return xs


def test_a_depthwise_conv_reading_a_host_tensor_is_filled_and_the_float_function_kept():
    g = optimize(import_onnx(_model()))
    assert [n.op for n in candidates(g)] == ["Conv"]
    fill = plan_channel_fill(g, [{"x": x} for x in _samples(4, 1)])
    (conv, bits), = fill.bits.items()
    # channel c is 2**-(c % 8) of the largest: filled to HEADROOM_BITS below it
    assert bits == [max(c % 8 - HEADROOM_BITS, 0) for c in range(C)]
    h = apply_channel_fill(g, fill)
    mul = next(n for n in h.nodes if n.op == "Mul" and n.name.endswith(".channel_fill"))
    assert mul.outputs[0] == h.node(conv).inputs[0]
    np.testing.assert_array_equal(h.consts[mul.inputs[1]].ravel(), np.exp2(bits).astype(np.float32))
    for x in _samples(3, 7):
        want, got = run_graph(g, {"x": x})["y"], run_graph(h, {"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_depthwise_conv_reading_an_accelerator_tensor_is_left_alone():
    g = optimize(import_onnx(_model(host_made=False)))
    assert [n.inputs[0] for n in candidates(g)] == ["x"]  # only the first conv, reading the graph input
    assert plan_channel_fill(g, [{"x": x} for x in _samples(2, 1)]).bits == {}


@pytest.mark.parametrize("config,dense", [("pynq", False), ("pynq_mul", False), ("pynq", True)])
def test_filling_lowers_the_int8_error_and_the_simulator_agrees(config, dense, monkeypatch):
    model = _model(dense=dense)
    cal, tests = _samples(8, 1), _samples(4, 2)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = [session.run(None, {"x": x})[0] for x in tests]

    def rel_error(module) -> float:
        got = [module.run(x, device="cpu")["y"] for x in tests]
        return float(sum(np.sum((a - b) ** 2) for a, b in zip(got, want)) / sum(np.sum(b ** 2) for b in want))

    filled = compile_module(model, config, calibrate=cal, host_int8=True)  # its depthwise conv runs on the host
    assert filled.notes.calibration.channel_fill is not None
    x = tests[0]
    assert np.array_equal(filled.run(x, device="cpu")["y"], filled.run(x, device="fsim")["y"])
    monkeypatch.setattr(channel_fill, "plan_channel_fill", lambda g, samples: ChannelFill())
    plain = compile_module(model, config, calibrate=cal, host_int8=True)
    assert plain.notes.calibration.channel_fill is None
    # the small channels had 7 bits fewer than the largest; filled, they lose at most HEADROOM_BITS
    # (depthwise: relative squared error 0.21 -> 4e-4; a dense conv balances them with its weights)
    assert rel_error(filled) < rel_error(plain) / 4


def test_fill_bits_keep_headroom_cap_and_the_weights_spread():
    w = np.ones((4, 1, 3, 3), np.float32)
    amax = np.array([8.0, 1.0, 2.0 ** -20, 0.0])
    k = fill_bits(amax, w)
    assert list(k) == [0, 3 - HEADROOM_BITS, MAX_BITS, 0]  # the largest stays, a silent channel stays
    # weights already spread: a channel may not move past the finest exponent one vector SHR reaches
    spread = np.ones((2, 1, 3, 3), np.float32)
    spread[1] *= 2.0 ** -(CHANNEL_SPREAD - 4)
    k = fill_bits(np.array([1.0, 2.0 ** -6]), spread)
    assert list(k) == [0, 1]
    assert list(fill_bits(np.array([1.0, 0.25]), np.zeros((2, 1, 3, 3), np.float32))) == [0, 0]


def test_a_dense_conv_reading_a_host_tensor_is_balanced_and_the_float_function_kept():
    g = optimize(import_onnx(_model(dense=True)))
    fill = plan_channel_fill(g, [{"x": x} for x in _samples(4, 1)])
    (conv, bits), = fill.bits.items()
    assert g.node(conv).attrs.get("group", 1) == 1
    assert max(bits) > 0 and all(0 <= k <= max(c % 8 - HEADROOM_BITS, 0) for c, k in enumerate(bits))
    h = apply_channel_fill(g, fill)
    for x in _samples(3, 7):
        np.testing.assert_allclose(run_graph(h, {"x": x})["y"], run_graph(g, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_balanced_bits_split_the_noise_between_activation_and_weights():
    w = np.ones((4, 2, 1, 1), np.float32)
    # channel 1 peaks 16x below channel 0: its activation noise over its weights' is 16**2 / its mean
    # square (1) = 256, so r = 256 ** (1/4) = 4 (2 bits) plus the extra bit, within the room
    # floor(log2 16) - HEADROOM_BITS; channel 0 has no room
    k = balanced_bits(np.array([16.0, 1.0]), np.array([64.0, 1.0]), w)
    assert list(k) == [0, min(2 + BALANCE_EXTRA_BITS, 4 - HEADROOM_BITS)]
    # weights that are far coarser than the activation: only the extra bit
    assert list(balanced_bits(np.array([16.0, 1.0]), np.array([64.0, 1e6]), w)) == [0, BALANCE_EXTRA_BITS]
    # a channel one bit below the top has no room at all
    assert list(balanced_bits(np.array([16.0, 8.0]), np.array([64.0, 1.0]), w)) == [0, 0]


def test_cli_compile_says_what_was_filled_and_the_accuracy_report_runs(tmp_path, capsys):
    import onnx

    from vtakit.cli import main

    onnx.save(_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", np.stack(_samples(4, 1)))
    np.save(tmp_path / "x.npy", _samples(1, 2)[0])
    assert main(["compile", str(tmp_path / "m.onnx"), "--config", "pynq", "--calibrate", str(tmp_path / "cal.npy"),
                 "--host-int8", "-o", str(tmp_path / "m.vtamod")]) == 0  # its depthwise conv runs on the host
    assert "channel fill: 1 conv input(s) quantized on the host scaled per channel (12 of 16 channels scaled up)" \
        in capsys.readouterr().out
    assert main(["report", str(tmp_path / "m.onnx"), "--accuracy", "--calibrate", str(tmp_path / "cal.npy"),
                 "--input", str(tmp_path / "x.npy")]) == 0
    text = capsys.readouterr().out
    assert "SQNR" in text and "output y" in text
