"""Per-output-channel weight exponents: each channel keeps its int8 resolution however its range
compares with the others', within one SHR of a vector; a network using them gives the same bits on
the host int8 reference, the functional simulator and the cycle model."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.quant.techniques.channel_scales import CHANNEL_SPREAD, channel_weight_exps, fit_bias
from vtakit.compiler.quant.quantize import EXP_RANGE, _weight_exp, ideal_exponent

RNG = np.random.default_rng(16)


def test_every_channel_gets_its_own_least_squared_error_exponent():
    gains = 2.0 ** -np.arange(0, 12, 3)                      # channels 1, 1/8, 1/64, 1/512 as large
    w = (RNG.standard_normal((4, 8, 3, 3)) * gains[:, None, None, None]).astype(np.float32)
    e = channel_weight_exps(w, ideal_exponent, EXP_RANGE[1])
    assert e.tolist() == [_weight_exp(w[c]) for c in range(4)]
    assert np.diff(e).tolist() == [3, 3, 3]
    w_q = np.rint(w * 2.0 ** e[:, None, None, None])
    assert (np.abs(w_q).reshape(4, -1).max(axis=1) >= 64).all()  # every channel uses most of the int8 range
    back = w_q * 2.0 ** -e[:, None, None, None]
    assert (np.linalg.norm((back - w).reshape(4, -1), axis=1) <= 0.02 * np.linalg.norm(w.reshape(4, -1), axis=1)).all()


def test_exponents_spread_over_one_vta_shr_and_zero_channels_take_the_finest():
    w = np.ones((3, 4), np.float32)
    w[1] *= 2.0 ** -20
    w[2] = 0
    e = channel_weight_exps(w, ideal_exponent, EXP_RANGE[1])
    assert e[1] - e[0] == CHANNEL_SPREAD and e[2] == e[1]


def test_a_bias_too_large_for_int32_coarsens_its_channel_but_never_below_the_coarsest():
    e_w = np.array([4, 20, 20])
    fitted = fit_bias(e_w, np.array([1.0, 1000.0, 0.0], np.float32), e_x=6)
    assert fitted[0] == 4 and fitted[2] == 20
    assert 1000.0 * 2.0 ** (6 + fitted[1]) < 2 ** 30 <= 1000.0 * 2.0 ** (7 + fitted[1])
    assert fit_bias(e_w, np.array([0.0, 1e12, 0.0], np.float32), e_x=6).tolist() == [4, 4, 20]


def _model() -> onnx.ModelProto:
    """conv (output channels whose ranges differ by up to 2**9) -> relu -> depthwise conv -> relu
    -> conv -> relu -> flatten -> gemm: per-channel shifts on the accelerator and on the host."""
    gains = (2.0 ** -RNG.integers(0, 10, 32)).astype(np.float32)
    w1 = (RNG.standard_normal((32, 16, 3, 3)) * 0.1 * gains[:, None, None, None]).astype(np.float32)
    b1 = (0.05 * gains).astype(np.float32)
    wd = (RNG.standard_normal((32, 1, 3, 3)) * 0.3 * 2.0 ** -RNG.integers(0, 8, 32)[:, None, None, None]
          ).astype(np.float32)
    w2 = (RNG.standard_normal((16, 32, 1, 1)) * 0.3 * 2.0 ** -RNG.integers(0, 6, 16)[:, None, None, None]
          ).astype(np.float32)
    wf = (RNG.standard_normal((10, 16 * 6 * 6)) * 0.05).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (wd, "wd"), (w2, "w2"), (wf, "wf"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd"], ["d"], pads=[1, 1, 1, 1], group=32),
             helper.make_node("Relu", ["d"], ["r2"]),
             helper.make_node("Conv", ["r2", "w2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r3"]),
             helper.make_node("Flatten", ["r3"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "per_channel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def compiled():
    model = _model()
    samples = [RNG.standard_normal((1, 16, 6, 6)).astype(np.float32) for _ in range(4)]
    return model, vtakit.compile(model, "pynq", calibrate=samples, host_int8=True)  # the depthwise conv: int8 on the host


def test_per_channel_network_is_bit_identical_on_host_fsim_and_cycle_model(compiled):
    model, module = compiled
    per_channel = {t.node for t in module.vta_tasks()} & {
        n.name for n in module.graph.nodes if isinstance(n.attrs.get("shift"), tuple)}
    assert len(per_channel) == 2                                        # both plain convs, on the accelerator
    dw = next(n for n in module.graph.nodes if n.op == "QConv" and n.attrs["group"] == 32)
    assert isinstance(dw.attrs["shift"], tuple)                         # the depthwise one, on the host
    x = RNG.standard_normal((1, 16, 6, 6)).astype(np.float32)
    ref = module.run(x, device="cpu")["y"]
    assert np.array_equal(module.run(x, device="fsim")["y"], ref)
    assert np.array_equal(module.run(x, device="sim")["y"], ref)
    assert module.last_run.accelerator_cycles > 0
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    cos = float(ref.ravel() @ want.ravel() / np.linalg.norm(ref) / np.linalg.norm(want))
    assert cos > 0.99, cos


def test_channels_split_only_where_that_halves_the_weights_squared_error(monkeypatch):
    from vtakit.compiler.quant.techniques import channel_scales
    from vtakit.compiler.quant.techniques.channel_scales import weight_exps

    monkeypatch.setattr(channel_scales, "CHANNEL_GAIN", 2.0)    # the rule at a gain of 2 (the default is 1)

    w = RNG.standard_normal((8, 64)).astype(np.float32)           # alike channels: one exponent
    assert len(set(weight_exps(w, _weight_exp, ideal_exponent, EXP_RANGE[1]).tolist())) == 1
    w[4:] *= 1 / 16                                              # half the channels 16 times smaller
    e = weight_exps(w, _weight_exp, ideal_exponent, EXP_RANGE[1])
    assert (e[4:] - e[:4].max() >= 3).all()


def test_channel_shifts_stay_below_32():
    """A channel whose weights are 2**-20 of the others' would need a shift past 31 (the light zoo's
    zoo had such a layer, refused before): it gets the coarsest exponent a 31-bit shift expresses."""
    from vtakit.compiler.quant.quantize import _linear_requant

    w = RNG.standard_normal((4, 16)).astype(np.float32)
    w[3] *= 2.0 ** -20
    e_w = np.array([7, 7, 7, 22])
    _, _, attrs = _linear_requant(w, np.zeros(4, np.float32), 10, e_w, -2, None)
    assert max(attrs["shift"]) == 31 and min(attrs["shift"]) == 19


def _wide_model() -> onnx.ModelProto:
    """conv (output channels 2**0 .. 2**-9 as large) -> sigmoid (a float op on the host) -> conv ->
    flatten -> gemm (rows as unlike): both the conv and the classifier keep their int32 accumulators."""
    gains = (2.0 ** -(np.arange(16) % 10)).astype(np.float32)
    w1 = (RNG.standard_normal((16, 8, 3, 3)) * 0.2 * 2.0 ** -(np.arange(16) % 10)[:, None, None, None]).astype(np.float32)
    w2 = (RNG.standard_normal((16, 16, 1, 1)) * 0.3).astype(np.float32)
    wf = (RNG.standard_normal((10, 16 * 4 * 4)) * 0.05 * 2.0 ** -np.arange(10)[:, None]).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (gains, "b1"), (w2, "w2"), (wf, "wf"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s"]),
             helper.make_node("Conv", ["s", "w2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "wide_per_channel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_int32_results_keep_per_channel_weight_exponents_and_the_host_scales_them_apart():
    """A conv whose result only the host reads keeps its int32 accumulator; its channels count steps of
    2**-(e_x + e_w[c]) and the Dequantize multiplies each by a power of two: no accelerator cycle, the
    small channels keep their int8 weight resolution, same bits on host, fsim and cycle model."""
    model = _wide_model()
    samples = [RNG.standard_normal((1, 8, 4, 4)).astype(np.float32) for _ in range(4)]
    module = vtakit.compile(model, "pynq", calibrate=samples)
    wide = [n for n in module.graph.nodes if n.op in ("QConv", "QDense")
            and module.graph.tensors[n.outputs[0]].dtype == "int32"]
    assert [n.name for n in wide] == ["Conv_0", "Gemm_5"]
    for n in wide:
        e_w = np.asarray(n.attrs["weight_exp"])
        assert e_w.size > 1 and e_w.max() - e_w.min() >= 5           # per channel
        dq = [d for d in module.graph.nodes if d.op == "Dequantize" and d.inputs[0] == n.outputs[0]]
        factor = module.graph.consts[dq[0].inputs[1]].ravel()
        assert np.array_equal(factor, 2.0 ** (e_w.max() - e_w))
        assert module.graph.tensors[n.outputs[0]].exp == module.graph.tensors[n.inputs[0]].exp + e_w.max()
    assert {"Conv_0", "Gemm_5"} <= {t.node for t in module.vta_tasks()}   # both on the accelerator
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in samples[:2]:
        ref = module.run(x, device="cpu")["y"]
        assert np.array_equal(module.run(x, device="fsim")["y"], ref)
        assert np.array_equal(module.run(x, device="sim")["y"], ref)
        want = sess.run(None, {"x": x})[0]
        small = slice(5, 10)                                          # rows 2**-5 .. 2**-9 as large
        rel = np.linalg.norm(ref[0, small] - want[0, small]) / np.linalg.norm(want[0, small])
        assert rel < 0.05, rel
