"""End-to-end tests of the operator API (`vtakit.ops`): numpy in, simulator, numpy out.

Every result is compared exactly (dtype and values) with the numpy references in
`vtakit.compiler.backends.vta.reference`, on the functional ("fsim") and the cycle ("sim")
simulator.  Every bad input must be a CompileError / DeviceError naming the
problem: never a wrong result and never a bare numpy/Python error.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import vtakit.ops as ops
from vtakit.compiler.backends.vta import reference
from vtakit.compiler.backends.vta.schedule import Schedule
from vtakit.compiler.backends.vta.templates import ConvKnobs, EltwiseKnobs, conv_schedule
from vtakit.errors import CompileError, DeviceError, VtaError
from vtakit.isa.config import HwConfig
from vtakit.sim import SimDevice

DEVICES = ["fsim", "sim"]
CONV_PRESETS = ["pynq", "1x8"]
ALL_PRESETS = ["pynq", "1x8", "2x16"]
# add, relu and max pool load int8 into the accumulator (LOAD.ACC8): VTA's pynq has no such
# load and leaves them to the host, so they are tested on pynq with acc8_load switched on
PYNQ_ACC8 = HwConfig.preset("pynq").replace(acc8_load=True)
ACC8 = PYNQ_ACC8
ELT_PRESETS = [PYNQ_ACC8, "pynq", "1x8", "2x16"]  # pynq: INP load + identity GEMM (lowering/move.py)
ELT_IDS = ["pynq+acc8", "pynq", "1x8", "2x16"]


def _i8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def _same(got: np.ndarray, expect: np.ndarray) -> None:
    assert got.dtype == expect.dtype, f"dtype {got.dtype}, expected {expect.dtype}"
    assert got.shape == expect.shape, f"shape {got.shape}, expected {expect.shape}"
    if not np.array_equal(got, expect):
        bad = np.argwhere(got != expect)
        i = tuple(bad[0])
        raise AssertionError(f"{len(bad)} of {got.size} elements differ; first at {i}: "
                             f"got {got[i]}, expected {expect[i]}")


# ------------------------------------------------------------ convolution
@st.composite
def conv_cases(draw):
    n = draw(st.integers(1, 3))
    c = draw(st.integers(1, 40))
    o = draw(st.integers(1, 40))
    k = draw(st.sampled_from([1, 3, 5, 7]))
    stride = draw(st.integers(1, 2))
    pad = draw(st.integers(0, k - 1))
    h = draw(st.integers(1, 18))
    w = draw(st.integers(1, 18))
    assume(h + 2 * pad >= k and w + 2 * pad >= k)   # the kernel must fit the padded input
    bias = draw(st.sampled_from([None, "small", "full"]))
    mode = draw(st.sampled_from(["int32", "shift", "clip", "both"]))
    shift = draw(st.integers(0, 31)) if mode in ("shift", "both") else None
    clip = None
    if mode in ("clip", "both"):
        lo = draw(st.integers(-128, 127))
        clip = (lo, draw(st.integers(lo, 127)))
    seed = draw(st.integers(0, 2**32 - 1))
    return dict(n=n, c=c, o=o, k=k, stride=stride, pad=pad, h=h, w=w, bias=bias, shift=shift,
                clip=clip, seed=seed)


def _conv_inputs(case):
    rng = np.random.default_rng(case["seed"])
    x = _i8(rng, (case["n"], case["c"], case["h"], case["w"]))
    wt = _i8(rng, (case["o"], case["c"], case["k"], case["k"]))
    b = None
    if case["bias"] == "small":
        b = rng.integers(-(1 << 12), 1 << 12, case["o"], dtype=np.int32)
    elif case["bias"] == "full":
        b = rng.integers(-(1 << 31), (1 << 31) - 1, case["o"], dtype=np.int32, endpoint=True)
    return x, wt, b


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", CONV_PRESETS)
@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=conv_cases())
def test_conv2d_matches_reference(preset, device, case):
    x, wt, b = _conv_inputs(case)
    y, rep = ops.conv2d(x, wt, stride=case["stride"], padding=case["pad"], bias=b, shift=case["shift"],
                        clip=case["clip"], config=preset, device=device)
    expect = reference.conv2d(x, wt, case["stride"], case["pad"], b, case["shift"], case["clip"])
    _same(y, expect)
    requant = case["shift"] is not None or case["clip"] is not None
    assert y.dtype == (np.int8 if requant else np.int32)
    assert rep.macs == int(np.prod(expect.shape)) * case["c"] * case["k"] ** 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_conv2d_fixed_cases(preset, device):
    """A few hand-picked shapes, including the batch-2 preset (batch padding)."""
    rng = np.random.default_rng(7)
    cases = [  # n, c, o, h, w, k, stride, pad
        (1, 16, 16, 8, 8, 3, 1, 1),
        (3, 17, 33, 9, 7, 3, 2, 1),
        (2, 1, 1, 1, 1, 1, 1, 0),
        (1, 40, 5, 11, 13, 5, 1, 2),
        (1, 3, 8, 12, 12, 7, 2, 3),
    ]
    for n, c, o, h, w, k, s, p in cases:
        x, wt = _i8(rng, (n, c, h, w)), _i8(rng, (o, c, k, k))
        b = rng.integers(-5000, 5000, o, dtype=np.int32)
        for kw in (dict(), dict(bias=b), dict(bias=b, shift=6, clip=(0, 127)), dict(shift=3)):
            y, _ = ops.conv2d(x, wt, stride=s, padding=p, config=preset, device=device, **kw)
            _same(y, reference.conv2d(x, wt, s, p, kw.get("bias"), kw.get("shift"), kw.get("clip")))


def test_conv2d_accumulator_wraps_like_reference():
    """Extreme data and an extreme bias: the 32-bit accumulator wraps the same way."""
    x = np.full((1, 40, 6, 6), -128, np.int8)
    wt = np.full((20, 40, 7, 7), -128, np.int8)
    b = np.array([2**31 - 1, -2**31] * 10, np.int32)
    for device in DEVICES:
        for kw in (dict(bias=b), dict(bias=b, shift=31), dict(bias=b, clip=(-3, 3))):
            y, _ = ops.conv2d(x, wt, padding=3, device=device, **kw)
            _same(y, reference.conv2d(x, wt, 1, 3, b, kw.get("shift"), kw.get("clip")))


@pytest.mark.parametrize("tile_ic", [1, 2])
def test_conv2d_on_a_map_larger_than_the_stride_field(tile_ic):
    """272 x 256 = 69,632 entries per channel block, more than a LOAD's 16-bit x_stride: the channel
    blocks of a tile become one transfer each (a layout-analysis model's 800 x 608 input met this)."""
    rng = np.random.default_rng(7)
    x, wt = _i8(rng, (1, 32, 272, 256)), _i8(rng, (16, 32, 1, 1))
    b = rng.integers(-1000, 1000, 16).astype(np.int32)
    knobs = ConvKnobs(tile_oc=1, tile_oh=2, tile_ow=256, tile_ic=tile_ic, vthreads=1)
    y, _ = ops.conv2d(x, wt, bias=b, shift=8, clip=(-128, 127), schedule=knobs)
    _same(y, reference.conv2d(x, wt, 1, 0, b, 8, (-128, 127)))


# ------------------------------------------------------------------ dense
DENSE_CASES = [  # batch, features in, features out
    (1, 16, 16),
    (1, 512, 10),
    (3, 17, 33),
    (4, 40, 1),
    (2, 1, 7),
    (5, 100, 45),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_dense_matches_reference(preset, device):
    rng = np.random.default_rng(11)
    for n, c, o in DENSE_CASES:
        x, wt = _i8(rng, (n, c)), _i8(rng, (o, c))
        b = rng.integers(-(1 << 15), 1 << 15, o, dtype=np.int32)
        for kw in (dict(), dict(bias=b), dict(bias=b, shift=8, clip=(0, 127)), dict(shift=5),
                   dict(clip=(-10, 10))):
            y, rep = ops.dense(x, wt, config=preset, device=device, **kw)
            _same(y, reference.dense(x, wt, **kw))
            assert rep.macs == n * c * o
            assert rep.name == "dense"


def test_matmul_is_dense():
    assert ops.matmul is ops.dense
    rng = np.random.default_rng(12)
    x, wt = _i8(rng, (3, 70)), _i8(rng, (21, 70))
    for device in DEVICES:
        y, _ = ops.matmul(x, wt, device=device)
        _same(y, reference.dense(x, wt))
        _same(y, (x.astype(np.int64) @ wt.T.astype(np.int64)).astype(np.int32))


# ---------------------------------------------------- elementwise, pooling
ELT_SHAPES = [(1, 16, 4, 4), (3, 21, 5, 7), (2, 40, 9, 1), (1, 1, 1, 1), (1, 8, 13, 11)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ELT_PRESETS, ids=ELT_IDS)
def test_add_matches_reference(preset, device):
    rng = np.random.default_rng(21)
    for shape in ELT_SHAPES:
        a, b = _i8(rng, shape), _i8(rng, shape)
        for kw in (dict(), dict(shift=0), dict(shift=1), dict(shift=3), dict(shift=1, clip=(-20, 50))):
            y, rep = ops.add(a, b, config=preset, device=device, **kw)
            _same(y, reference.add(a, b, **kw))
            assert rep.name == "add" and rep.macs == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ELT_PRESETS, ids=ELT_IDS)
def test_relu_matches_reference(preset, device):
    rng = np.random.default_rng(22)
    for shape in ELT_SHAPES:
        x = _i8(rng, shape)
        x.flat[0] = -128
        y, _ = ops.relu(x, config=preset, device=device)
        _same(y, reference.relu(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_requantize_matches_reference(preset, device):
    rng = np.random.default_rng(23)
    for shape in ELT_SHAPES:
        x = rng.integers(-(1 << 31), (1 << 31) - 1, shape, dtype=np.int32, endpoint=True)
        small = rng.integers(-3000, 3000, shape, dtype=np.int32)
        for data in (x, small):
            for kw in (dict(shift=0), dict(shift=4), dict(shift=24), dict(shift=31),
                       dict(shift=4, clip=(0, 127)), dict(shift=2, clip=(-5, -5))):
                y, _ = ops.requantize(data, config=preset, device=device, **kw)
                _same(y, reference.requantize(data, **kw))


POOL_WINDOWS = [(k, s, p) for k in (2, 3) for s in (1, 2) for p in range(k)]
POOL_SHAPES = [(1, 16, 8, 8), (3, 21, 7, 9), (2, 5, 1, 3)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ELT_PRESETS, ids=ELT_IDS)
def test_max_pool2d_matches_reference(preset, device):
    rng = np.random.default_rng(24)
    for shape in POOL_SHAPES:
        x = _i8(rng, shape)
        x[..., 0, 0] = -128  # padding must never win, even over the most negative value
        for k, s, p in POOL_WINDOWS:
            if shape[2] + 2 * p < k or shape[3] + 2 * p < k:
                continue
            y, _ = ops.max_pool2d(x, kernel=k, stride=s, padding=p, config=preset, device=device)
            _same(y, reference.max_pool2d(x, k, s, p))


def test_max_pool2d_default_stride_is_kernel():
    x = _i8(np.random.default_rng(25), (1, 20, 9, 9))
    for device in DEVICES:
        y, _ = ops.max_pool2d(x, kernel=3, device=device, config=ACC8)
        _same(y, reference.max_pool2d(x, 3, 3, 0))


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(n=st.integers(1, 3), c=st.integers(1, 40), h=st.integers(1, 18), w=st.integers(1, 18),
       k=st.sampled_from([2, 3]), s=st.integers(1, 2), data=st.data())
def test_max_pool2d_random_shapes(n, c, h, w, k, s, data):
    p = data.draw(st.integers(0, k - 1))
    assume(h + 2 * p >= k and w + 2 * p >= k)
    preset = data.draw(st.sampled_from(ELT_PRESETS))
    device = data.draw(st.sampled_from(DEVICES))
    x = _i8(np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))), (n, c, h, w))
    y, _ = ops.max_pool2d(x, kernel=k, stride=s, padding=p, config=preset, device=device)
    _same(y, reference.max_pool2d(x, k, s, p))


# -------------------------------------------------------------- OpReport
def test_report_conv2d():
    rng = np.random.default_rng(31)
    x, wt = _i8(rng, (2, 20, 10, 9)), _i8(rng, (24, 20, 3, 3))
    b = rng.integers(-100, 100, 24, dtype=np.int32)
    cfg = HwConfig.preset("pynq")
    reports = {}
    for device in DEVICES:
        y, rep = ops.conv2d(x, wt, stride=2, padding=1, bias=b, shift=4, device=device, name="myconv")
        _same(y, reference.conv2d(x, wt, 2, 1, b, 4))
        reports[device] = rep
        oh, ow = (10 + 2 - 3) // 2 + 1, (9 + 2 - 3) // 2 + 1
        assert rep.name == "myconv"
        assert rep.macs == 2 * 24 * oh * ow * 20 * 9
        assert rep.instructions > 0 and rep.uop_words > 0
        assert rep.gemm_uops > 0 and rep.alu_uops > 0
        assert rep.bytes_moved > 0
        assert rep.compile_s >= 0 and rep.run_s >= 0
        assert isinstance(rep.schedule, dict)
        assert set(rep.schedule) == {f.name for f in dataclasses.fields(ConvKnobs)}
        assert ConvKnobs(**rep.schedule).to_dict() == rep.schedule
        d = rep.to_dict()
        assert "stats" not in d and d["macs"] == rep.macs and d["schedule"] == rep.schedule
    fs, cs = reports["fsim"], reports["sim"]
    assert fs.cycles is None and fs.utilization is None and fs.gops is None
    assert isinstance(cs.cycles, int) and cs.cycles > 0
    assert cs.utilization == pytest.approx(cs.macs / (cs.cycles * cfg.peak_macs_per_cycle))
    assert 0 < cs.utilization <= 1
    assert cs.gops == pytest.approx(2 * cs.macs / (cs.cycles / (cfg.clock_mhz * 1e6)) / 1e9)
    # the same program on both models
    assert fs.instructions == cs.instructions and fs.uop_words == cs.uop_words
    assert fs.gemm_uops == cs.gemm_uops and fs.schedule == cs.schedule


@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_report_macs_and_utilization_per_preset(preset):
    cfg = HwConfig.preset(preset)
    rng = np.random.default_rng(32)
    x, wt = _i8(rng, (3, 33, 7, 7)), _i8(rng, (17, 33, 5, 5))
    _, rep = ops.conv2d(x, wt, padding=2, config=preset, device="sim")
    assert rep.macs == 3 * 17 * 7 * 7 * 33 * 25         # true MACs, not padded ones
    assert rep.utilization == pytest.approx(rep.macs / (rep.cycles * cfg.peak_macs_per_cycle))
    _, rep = ops.dense(x[:, :, 0, 0], wt[:, :, 0, 0], config=preset, device="sim")
    assert rep.macs == 3 * 33 * 17
    assert rep.utilization == pytest.approx(rep.macs / (rep.cycles * cfg.peak_macs_per_cycle))


def test_eltwise_without_acc8_load_or_identity_gemm():
    """Without LOAD.ACC8 the int8 operators move their tiles by an identity GEMM, which needs
    block_in == block_out: otherwise a CompileError, not a program that VTA would run differently."""
    x = _i8(np.random.default_rng(34), (1, 16, 4, 4))
    odd = HwConfig.preset("pynq").replace(block_in=8, inp_buff_bytes=1 << 14, wgt_buff_bytes=1 << 17)
    for fn in (lambda: ops.relu(x, config=odd), lambda: ops.add(x, x, config=odd),
               lambda: ops.max_pool2d(x, kernel=2, config=odd)):
        _raises(CompileError, fn, "acc8_load is false")


def test_report_eltwise():
    x = _i8(np.random.default_rng(33), (1, 20, 6, 6))
    for device in DEVICES:
        for fn in (lambda: ops.relu(x, device=device, config=ACC8),
                   lambda: ops.add(x, x, device=device, config=ACC8),
                   lambda: ops.max_pool2d(x, kernel=2, device=device, config=ACC8)):
            _, rep = fn()
            assert rep.macs == 0
            assert rep.instructions > 0 and rep.uop_words > 0 and rep.alu_uops > 0
            assert set(rep.schedule) == {f.name for f in dataclasses.fields(EltwiseKnobs)}
            if device == "fsim":
                assert rep.cycles is None and rep.utilization is None
            else:
                assert rep.cycles > 0


# ------------------------------------------------------ explicit schedules
def _small_conv(seed=41):
    rng = np.random.default_rng(seed)
    x, wt = _i8(rng, (1, 40, 12, 10)), _i8(rng, (36, 40, 3, 3))
    b = rng.integers(-2000, 2000, 36, dtype=np.int32)
    return x, wt, b


@pytest.mark.parametrize("device", DEVICES)
def test_explicit_schedules_match_default(device):
    x, wt, b = _small_conv()
    kw = dict(padding=1, bias=b, shift=5, device=device)
    expect = reference.conv2d(x, wt, 1, 1, b, 5)
    y0, rep0 = ops.conv2d(x, wt, **kw)
    _same(y0, expect)
    knobs = ConvKnobs(**rep0.schedule)
    y1, rep1 = ops.conv2d(x, wt, schedule=knobs, **kw)
    y2, rep2 = ops.conv2d(x, wt, schedule=dict(rep0.schedule), **kw)
    y3, rep3 = ops.conv2d(x, wt, schedule=conv_schedule(knobs, bias=True, bias_gemm=True), **kw)
    y4, _ = ops.conv2d(x, wt, schedule=conv_schedule(knobs, bias=True), **kw)   # the ALU ADD of an acc vector
    for y in (y1, y2, y3, y4):
        _same(y, y0)
    assert rep1.schedule == rep2.schedule == rep0.schedule
    assert rep1.instructions == rep2.instructions == rep3.instructions == rep0.instructions
    assert rep3.schedule == {"steps": [list(s) for s in conv_schedule(knobs, bias=True, bias_gemm=True).steps]}
    if device == "sim":
        assert rep1.cycles == rep2.cycles == rep3.cycles == rep0.cycles


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_vthreads_one_and_two_agree(preset, device):
    x, wt, b = _small_conv(42)
    outs = {}
    for vt in (1, 2):
        y, rep = ops.conv2d(x, wt, padding=1, bias=b, shift=7, clip=(0, 127), config=preset, device=device,
                            vthreads=vt)
        assert rep.schedule["vthreads"] == vt
        outs[vt] = y
    _same(outs[1], outs[2])
    _same(outs[1], reference.conv2d(x, wt, 1, 1, b, 7, (0, 127)))
    # the elementwise operators as well (the default clamps threads to the row tiles, so say the tiles)
    preset = PYNQ_ACC8 if preset == "pynq" else preset
    for vt in (1, 2):
        y, rep = ops.add(x, x, shift=1, config=preset, device=device, schedule=EltwiseKnobs(1, 3, vt))
        _same(y, reference.add(x, x, shift=1))
        assert rep.schedule["vthreads"] == vt
        y, rep = ops.add(x, x, shift=1, config=preset, device=device, vthreads=vt)
        _same(y, reference.add(x, x, shift=1))
        assert rep.schedule["vthreads"] <= vt


KNOB_VARIANTS = [
    ConvKnobs(1, 1, 12, 1, vthreads=1),
    ConvKnobs(1, 2, 12, 1, "oc", "oh", 2),
    ConvKnobs(3, 5, 7, 2, "sp", "oh", 2),
    ConvKnobs(2, 12, 12, 3, "oc", "oc", 2),
    ConvKnobs(1, 4, 5, 3, "sp", "oc", 3, hoist_weights=True),
    ConvKnobs(3, 3, 10, 3, "oc", "oh", 4, hoist_weights=True),
    ConvKnobs(1, 3, 4, 1, "oc", "oh", 2, hoist_weights=True),   # weights hoisted over a partial ic
    ConvKnobs(3, 12, 10, 3, vthreads=1, hoist_weights=True),
]


@pytest.mark.parametrize("knobs", KNOB_VARIANTS, ids=lambda k: "-".join(map(str, k.to_dict().values())))
def test_explicit_knob_variants_are_correct(knobs):
    x, wt, b = _small_conv(43)
    expect = reference.conv2d(x, wt, 1, 1, b, 6, (-60, 60))
    for preset in ("pynq", "1x8"):
        for device in DEVICES:
            # knob tiles are in blocks: keep them valid for both block sizes by using the same knobs
            y, rep = ops.conv2d(x, wt, padding=1, bias=b, shift=6, clip=(-60, 60), config=preset,
                                device=device, schedule=knobs)
            _same(y, expect)
            assert rep.schedule == knobs.to_dict()


@pytest.mark.parametrize("device", DEVICES)
def test_explicit_eltwise_knobs(device):
    rng = np.random.default_rng(44)
    a, b = _i8(rng, (2, 40, 9, 5)), _i8(rng, (2, 40, 9, 5))
    expect = reference.add(a, b, shift=1)
    for knobs in (EltwiseKnobs(1, 1, 1), EltwiseKnobs(2, 3, 2), EltwiseKnobs(3, 9, 1),
                  dict(tile_c=1, tile_h=4, vthreads=2)):
        y, rep = ops.add(a, b, shift=1, device=device, schedule=knobs, config=ACC8)
        _same(y, expect)
        want = knobs.to_dict() if isinstance(knobs, EltwiseKnobs) else knobs
        assert rep.schedule == want
    y, _ = ops.max_pool2d(a, kernel=3, stride=2, padding=1, device=device, schedule=EltwiseKnobs(1, 2, 2),
                          config=ACC8)
    _same(y, reference.max_pool2d(a, 3, 2, 1))


# ------------------------------------------------------------ error paths
def _raises(exc, fn, *words):
    with pytest.raises(exc) as info:
        fn()
    assert type(info.value) is exc or issubclass(type(info.value), exc)
    msg = str(info.value)
    for w in words:
        assert w.lower() in msg.lower(), f"{w!r} not in message {msg!r}"
    return msg


RNG = np.random.default_rng(51)
X = _i8(RNG, (1, 20, 8, 8))
W = _i8(RNG, (24, 20, 3, 3))


def test_error_wrong_dtype():
    _raises(CompileError, lambda: ops.conv2d(X.astype(np.float32), W), "x", "int8", "float32")
    _raises(CompileError, lambda: ops.conv2d(X, W.astype(np.int16)), "w", "int8", "int16")
    _raises(CompileError, lambda: ops.conv2d(X.astype(np.uint8), W), "x", "int8", "uint8")
    _raises(CompileError, lambda: ops.conv2d(X, W, bias=np.zeros(24, np.int64)), "bias", "int32")
    _raises(CompileError, lambda: ops.conv2d(X, W, bias=np.zeros(24, np.float32)), "bias", "int32")
    _raises(CompileError, lambda: ops.dense(X[0, 0].astype(np.float32), W[:, :, 0, 0]), "int8")
    _raises(CompileError, lambda: ops.add(X.astype(np.int16), X.astype(np.int16), config=ACC8),
            "int8", "int16")
    _raises(CompileError, lambda: ops.relu(X.astype(np.int32), config=ACC8), "int8", "int32")
    _raises(CompileError, lambda: ops.requantize(X, shift=2), "int32", "int8")
    _raises(CompileError, lambda: ops.max_pool2d(X.astype(np.float32), kernel=2, config=ACC8),
            "int8", "float32")
    _raises(CompileError, lambda: ops.conv2d(X.tolist(), W), "numpy array", "list")


def test_error_wrong_rank():
    _raises(CompileError, lambda: ops.conv2d(X[0], W), "x", "4 dimensions")
    _raises(CompileError, lambda: ops.conv2d(X, W[0]), "w", "4 dimensions")
    _raises(CompileError, lambda: ops.conv2d(X, W, bias=np.zeros((24, 1), np.int32)), "bias", "1 dimensions")
    _raises(CompileError, lambda: ops.dense(X, W), "2 dimensions")
    _raises(CompileError, lambda: ops.relu(X[0], config=ACC8), "4 dimensions")
    _raises(CompileError, lambda: ops.max_pool2d(X[0, 0], kernel=2, config=ACC8), "4 dimensions")
    _raises(CompileError, lambda: ops.conv2d(X[:0], W), "empty")


def test_error_channel_mismatch():
    _raises(CompileError, lambda: ops.conv2d(X, W[:, :10]), "10 input channels", "20")
    _raises(CompileError, lambda: ops.dense(X[:, :, 0, 0], W[:, :5, 0, 0]), "features")


def test_error_bias_length():
    _raises(CompileError, lambda: ops.conv2d(X, W, bias=np.zeros(5, np.int32)), "bias", "5", "24")
    _raises(CompileError, lambda: ops.dense(X[:, :, 0, 0], W[:, :, 0, 0], bias=np.zeros(25, np.int32)),
            "bias", "25")


def test_error_bad_stride_padding():
    for kw in (dict(stride=0), dict(stride=-1), dict(stride=1.5), dict(padding=-1), dict(padding=0.5)):
        _raises(CompileError, lambda: ops.conv2d(X, W, **kw), "stride", "padding")
    _raises(CompileError, lambda: ops.conv2d(X[:, :, :2, :2], W), "does not fit")
    _raises(CompileError, lambda: ops.conv2d(X[:, :, :1, :], W, padding=0), "does not fit")


def test_error_shift_out_of_range():
    for shift in (-1, 32, 100, 2.0):
        _raises(CompileError, lambda: ops.conv2d(X, W, shift=shift), "shift")
        _raises(CompileError, lambda: ops.add(X, X, shift=shift, config=ACC8), "shift")
        _raises(CompileError, lambda: ops.requantize(X.astype(np.int32), shift=shift), "shift")


def test_error_clip_outside_int8():
    for clip in ((0, 200), (-129, 0), (10, 5), (-1000, 1000)):
        _raises(CompileError, lambda: ops.conv2d(X, W, clip=clip), "clip")
        _raises(CompileError, lambda: ops.add(X, X, clip=clip, config=ACC8), "clip")
        _raises(CompileError, lambda: ops.requantize(X.astype(np.int32), shift=1, clip=clip), "clip")


def test_error_clip_malformed():
    """A clip that is not a (lo, hi) pair is a CompileError too, not a bare TypeError/ValueError."""
    for clip in (5, (1,), (1, 2, 3)):
        _raises(CompileError, lambda: ops.conv2d(X, W, clip=clip), "clip")


def test_error_tile_overflows_buffer():
    rng = np.random.default_rng(52)
    x, wt = _i8(rng, (1, 64, 56, 56)), _i8(rng, (64, 64, 3, 3))
    _raises(CompileError, lambda: ops.conv2d(x, wt, padding=1, schedule=ConvKnobs(4, 56, 56, 4, vthreads=1),
                                             device="fsim"), "inp buffer overflows")
    # two threads of a tile that alone fits
    _raises(CompileError, lambda: ops.conv2d(x, wt, padding=1, schedule=ConvKnobs(1, 28, 56, 1, vthreads=2),
                                             device="fsim"), "buffer overflows")
    _raises(CompileError, lambda: ops.relu(x, schedule=EltwiseKnobs(4, 56, 1), device="fsim", config=ACC8),
            "acc buffer overflows")


def test_error_vthreads_more_than_tiles():
    # one row tile (tile_oh = all 8 rows) cannot be split over two virtual threads
    _raises(CompileError, lambda: ops.conv2d(X, W, padding=1, schedule=ConvKnobs(1, 8, 8, 1, vthreads=2)),
            "virtual_thread", "extent 1")
    _raises(CompileError, lambda: ops.conv2d(X, W, padding=1,
                                             schedule=ConvKnobs(2, 2, 8, 2, vthread_axis="oc", vthreads=2)),
            "virtual_thread", "extent 1")
    _raises(CompileError, lambda: ops.relu(X, schedule=EltwiseKnobs(1, 8, 2), config=ACC8),
            "virtual_thread", "extent 1")


def test_error_vthreads_argument_more_than_tiles():
    """`vthreads=16` for an 8-row, 2-block output: no tiling has 16 tiles; the message should say
    so (threads), not blame the buffers."""
    _raises(CompileError, lambda: ops.conv2d(X, W, padding=1, vthreads=16), "thread")


def test_error_schedule_missing_axis():
    _raises(CompileError, lambda: ops.conv2d(X, W, schedule=Schedule().split("foo", 2)), "'foo'",
            "does not exist")
    s = conv_schedule(ConvKnobs(1, 2, 8, 1)).split("zz", 2)
    _raises(CompileError, lambda: ops.conv2d(X, W, padding=1, schedule=s), "'zz'")
    _raises(CompileError, lambda: ops.conv2d(X, W, padding=1, schedule=Schedule().split("oc", 1)),
            "tensorize")
    _raises(CompileError, lambda: ops.conv2d(X, W, padding=1,
                                             schedule=ConvKnobs(1, 2, 8, 1, vthread_axis="kh")), "'kh.o'")


def test_error_bad_knob_dicts():
    _raises(CompileError, lambda: ops.conv2d(X, W, schedule={"tile_oc": 1, "bogus": 2}), "knobs", "bogus")
    _raises(CompileError, lambda: ops.conv2d(X, W, schedule={"tile_oc": 1}), "knobs", "tile_oh")
    _raises(CompileError, lambda: ops.conv2d(X, W, schedule=dict(tile_oc=0, tile_oh=1, tile_ow=1, tile_ic=1)),
            "split factor 0")
    _raises(CompileError, lambda: ops.conv2d(X, W, schedule=dict(tile_oc=1, tile_oh=-2, tile_ow=1, tile_ic=1)),
            "split factor -2")
    _raises(CompileError, lambda: ops.relu(X, schedule={"tile_c": 1}, config=ACC8), "knobs", "tile_h")
    _raises(CompileError, lambda: ops.relu(X, schedule={"tile_c": 1, "tile_h": 1, "threads": 2}, config=ACC8),
            "knobs")
    _raises(CompileError, lambda: ops.conv2d(X, W, schedule="fast"), "schedule must be")
    _raises(CompileError, lambda: ops.conv2d(X, W, schedule=EltwiseKnobs(1, 1, 1)), "schedule")


def test_error_unknown_device():
    _raises(DeviceError, lambda: ops.conv2d(X, W, device="gpu"), "unknown device", "'gpu'")
    _raises(DeviceError, lambda: ops.relu(X, device="tpu", config=ACC8), "unknown device")
    _raises(DeviceError, lambda: ops.conv2d(X, W, device=42), "not a Device")


def test_error_device_of_another_configuration():
    dev = SimDevice(HwConfig.preset("1x8"), model="functional", dram_bytes=1 << 22)
    _raises(DeviceError, lambda: ops.conv2d(X, W, device=dev), "1x8", "pynq")
    _raises(DeviceError, lambda: ops.add(X, X, device=dev, config="2x16"), "1x8", "2x16")
    # the matching configuration works on the same device
    y, _ = ops.conv2d(X, W, padding=1, config="1x8", device=dev)
    _same(y, reference.conv2d(X, W, 1, 1))


def test_error_max_pool_padding():
    for k, p in ((2, 2), (3, 3), (3, 5), (1, 1)):
        _raises(CompileError, lambda: ops.max_pool2d(X, kernel=k, padding=p, config=ACC8),
                "padding", "window")
    _raises(CompileError, lambda: ops.max_pool2d(X, kernel=9, config=ACC8), "does not fit")


def test_error_max_pool_bad_stride():
    """stride=0 is not 'the default': it must be rejected like a convolution's stride 0."""
    for stride in (0, -1):
        _raises(CompileError, lambda: ops.max_pool2d(X, kernel=2, stride=stride, config=ACC8), "stride")


def test_error_add_shapes_differ():
    _raises(CompileError, lambda: ops.add(X, X[:, :5], config=ACC8), "shapes differ")
    _raises(CompileError, lambda: ops.add(X, X[:, :, :, :7], config=ACC8), "shapes differ")


def test_errors_are_vta_errors_naming_the_op():
    msg = _raises(CompileError, lambda: ops.conv2d(X, W, shift=99, name="layer7"), "layer7")
    assert msg.startswith("op layer7")
    assert issubclass(CompileError, VtaError) and issubclass(DeviceError, VtaError)
