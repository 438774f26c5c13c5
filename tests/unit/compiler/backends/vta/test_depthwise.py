"""Depthwise convolutions on the accelerator as a block-diagonal GEMM (`compiler/backends/vta/depthwise.py`):
bit-exact against numpy on fsim and the cycle model for channel counts that are not multiples of the
block, odd sizes, strides 1 and 2, symmetric and asymmetric pads and per-channel shifts; the bias
added by GEMM where it fits the lanes (else the ALU ADD), with the multiplier epilogue on pynq_mul; the
placement rule; one RTL run."""

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.depthwise import DepthwiseKnobs, compile_depthwise, default_depthwise_knobs, depthwise_choice, depthwise_cost, depthwise_def, depthwise_shape, host_cycles, pack_depthwise_weight, simulated_cycles
from vtakit.compiler.backends.vta.lowering import ONES, bias_fits, pack_bias_weight
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_bias, resolve_device, run_compiled, unpack_activation
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from vtakit.isa.opcodes import MemId

PYNQ = HwConfig.preset("pynq")
PYNQ_MUL = HwConfig.preset("pynq_mul")
RNG = np.random.default_rng(1616)

CASES = [  # channels, height, width, kernel, stride, pads (top, left, bottom, right)
    (24, 9, 11, 3, 1, (1, 1, 1, 1)),
    (40, 13, 13, 3, 2, (0, 0, 1, 1)),      # stride-2 "same" (TensorFlow's SAME_UPPER)
    (16, 8, 8, 5, 2, (1, 2, 2, 1)),
    (72, 15, 7, 3, 2, (1, 1, 1, 1)),
    (5, 7, 6, 3, 1, (0, 0, 0, 0)),
    (33, 10, 9, 5, 1, (2, 2, 2, 2)),
]


def operands(c: int, h: int, w: int, k: int):
    x = RNG.integers(-128, 128, (1, c, h, w), dtype=np.int8)
    wt = RNG.integers(-128, 128, (c, 1, k, k), dtype=np.int8)
    b = RNG.integers(-5000, 5000, c, dtype=np.int32)
    return x, wt, b


@pytest.mark.parametrize("device", ["fsim", "sim"])
@pytest.mark.parametrize("c, h, w, k, stride, pads", CASES)
def test_depthwise_matches_numpy(device, c, h, w, k, stride, pads):
    x, wt, b = operands(c, h, w, k)
    y, rep = ops.depthwise_conv2d(x, wt, stride=stride, padding=pads, bias=b, shift=7, clip=(0, 120),
                                  device=device)
    want = reference.conv2d(x, wt, stride, pads, b, shift=7, clip=(0, 120), groups=c)
    assert y.shape == want.shape and np.array_equal(y, want)
    assert len(np.unique(y)) > 8                        # not all clipped or all zero
    if device == "sim":
        assert rep.cycles > 0 and rep.gemm_uops > 0


@pytest.mark.parametrize("device", ["fsim", "sim"])
def test_depthwise_with_per_channel_shifts_and_int32_result(device):
    x, wt, b = operands(40, 9, 9, 3)
    shifts = RNG.integers(3, 17, 40)
    y, _ = ops.depthwise_conv2d(x, wt, stride=2, padding=(0, 0, 1, 1), bias=b, shift=shifts, clip=(0, 96),
                                device=device)
    assert np.array_equal(y, reference.conv2d(x, wt, 2, (0, 0, 1, 1), b, shift=shifts, clip=(0, 96), groups=40))
    acc, _ = ops.depthwise_conv2d(x, wt, padding=1, device=device)   # no requantization: the int32 sums
    assert acc.dtype == np.int32 and np.array_equal(acc, reference.conv2d(x, wt, 1, 1, groups=40))


def test_diagonal_weight_blocks():
    wt = np.arange(1, 55, dtype=np.int8).reshape(18, 1, 3, 1)
    packed = pack_depthwise_weight(wt, 16)
    assert packed.shape == (2, 3, 1, 16, 16)
    assert packed[0, 1, 0, 5, 5] == wt[5, 0, 1, 0] and packed[1, 2, 0, 1, 1] == wt[17, 0, 2, 0]
    assert packed[0, 0, 0, 5, 6] == 0 and not packed[1, :, :, 2:, 2:].any()   # channels 18..31 are padding


def test_cost_model_follows_the_cycle_model():
    """The default knobs' estimate stays within 30 % of the cycle simulator on a MobileNet-sized layer."""
    x, wt, b = operands(64, 28, 28, 3)
    y, rep = ops.depthwise_conv2d(x, wt, stride=1, padding=1, bias=b, shift=8, clip=(0, 127), device="sim")
    compute = depthwise_def(PYNQ, n=1, c=64, h=28, w=28, kh=3, kw=3, stride=1, pads=(1,) * 4, bias=True, shift=8,
                            clip=(0, 127), bias_gemm=True)
    shape = depthwise_shape(PYNQ, n=1, c=64, h=28, w=28, kh=3, kw=3, stride=1, pads=(1,) * 4, compute=compute)
    est = depthwise_cost(PYNQ, shape, default_depthwise_knobs(PYNQ, shape))
    assert abs(est - rep.cycles) <= 0.3 * rep.cycles, (est, rep.cycles)


def test_placement_weighs_the_cycle_model_against_the_host_round_trip():
    """Stride-2 and 5x5 layers win on the accelerator; a small 3x3 one with a full epilogue does not."""
    big = dict(x_shape=(1, 144, 56, 56), kernel=(5, 5), stride=2, pads=(1, 1, 2, 2), bias=True, shift=0,
               clip=(0, 127), channel_shift=True)
    assert depthwise_choice(PYNQ, **big) is None
    small = dict(big, x_shape=(1, 24, 17, 17), kernel=(3, 3), stride=1, pads=(1, 1, 1, 1))
    assert "host round trip is cheaper" in depthwise_choice(PYNQ, **small)
    assert simulated_cycles(PYNQ, **small) > host_cycles(PYNQ, depthwise_shape(
        PYNQ, n=1, c=24, h=17, w=17, kh=3, kw=3, stride=1, pads=(1, 1, 1, 1),
        compute=depthwise_def(PYNQ, n=1, c=24, h=17, w=17, kh=3, kw=3, stride=1, pads=(1, 1, 1, 1), bias=True,
                              shift=0, clip=(0, 127), channel_shift=True)))
    # the bias by GEMM (its values fit the lanes) is what the placement counts: fewer cycles than the ALU ADD
    assert simulated_cycles(PYNQ, **small, bias_gemm=True) < simulated_cycles(PYNQ, **small)
    slow_bus = PYNQ.replace(block_in=8, inp_buff_bytes=1 << 14, wgt_buff_bytes=1 << 17)
    assert "diagonal weight blocks" in depthwise_choice(slow_bus, **big)


BIAS_CASES = [  # channels, size, kernel, stride, pads
    (24, 11, 3, 1, (1, 1, 1, 1)),
    (40, 13, 3, 2, (0, 0, 1, 1)),
    (33, 10, 5, 1, (2, 2, 2, 2)),
]


def run_depthwise(cfg: HwConfig, x, wt, b, *, stride, pads, bias_gemm: bool, device: str, shift: int,
                  mult=None, pre_shift: int = 0):
    """compile_depthwise run directly: the bias as WGT digit blocks (`bias_gemm`) or as an acc vector, and
    the multiplier epilogue (which ops.depthwise_conv2d does not take); returns (y, op, stats)."""
    op, _ = compile_depthwise(cfg, x_shape=x.shape, kernel=wt.shape[2:], stride=stride, pads=pads, bias=True,
                              shift=shift, clip=(0, 120), pre_shift=pre_shift if mult is not None else None,
                              bias_gemm=bias_gemm)
    inputs = {"data": pack_activation(x, cfg.batch, cfg.block_in), "weight": pack_depthwise_weight(wt, cfg.block_out),
              "bias": pack_bias_weight(b, cfg) if bias_gemm else pack_bias(b, cfg.batch, cfg.block_out)}
    if mult is not None:
        inputs["mult"] = pack_bias(mult, cfg.batch, cfg.block_out)
    out, stats = run_compiled(op, resolve_device(device, cfg), inputs)
    return unpack_activation(out, x.shape[0], x.shape[1]), op, stats


@pytest.mark.parametrize("cfg", [PYNQ, PYNQ_MUL], ids=["pynq", "pynq_mul"])
@pytest.mark.parametrize("c, size, k, stride, pads", BIAS_CASES)
def test_bias_by_gemm_is_bit_exact(cfg, c, size, k, stride, pads):
    """Host reference == fsim == cycle model with the bias added by GEMM, and with the ALU ADD form.  On
    pynq_mul the epilogue multiplies by per-channel multipliers after a pre-shift."""
    x, wt, b = operands(c, size, size, k)
    mult = RNG.integers(256, 1024, c).astype(np.int32) if cfg.alu_mul else None
    args = dict(shift=12, pre_shift=4, mult=mult) if cfg.alu_mul else dict(shift=7)
    want = reference.conv2d(x, wt, stride, pads, b, shift=args["shift"], clip=(0, 120), groups=c, multiplier=mult,
                            pre_shift=args.get("pre_shift", 0))
    assert bias_fits(cfg, b) and len(np.unique(want)) > 8
    y, op, _ = run_depthwise(cfg, x, wt, b, stride=stride, pads=pads, bias_gemm=True, device="fsim", **args)
    assert np.array_equal(y, want) and ONES in op.tensors and op.tensors["bias"].mem == MemId.WGT
    y, _, _ = run_depthwise(cfg, x, wt, b, stride=stride, pads=pads, bias_gemm=True, device="sim", **args)
    assert np.array_equal(y, want)
    y, op, _ = run_depthwise(cfg, x, wt, b, stride=stride, pads=pads, bias_gemm=False, device="sim", **args)
    assert np.array_equal(y, want) and ONES not in op.tensors and op.tensors["bias"].mem == MemId.ACC


@pytest.mark.parametrize("schedule", [None, DepthwiseKnobs(1, 4, 8)])
@pytest.mark.parametrize("stride, pads", [(0, (1, 1, 1, 1)), (1, (1, 1, 1)), (1.5, (1,) * 4), (1, (1, -1, 1, 1))])
def test_a_bad_stride_or_pads_is_one_error_naming_the_op(stride, pads, schedule):
    with pytest.raises(CompileError, match="stride must be >= 1 and pads four values >= 0") as e:
        compile_depthwise(PYNQ, x_shape=(1, 16, 8, 8), kernel=(3, 3), stride=stride, pads=pads, schedule=schedule,
                          name="dw7")
    assert "dw7" in str(e.value) and "\n" not in str(e.value)


def test_a_tiling_the_placement_hinges_on_is_refined_on_the_cycle_model():
    """MobileNet's 1x512x14x14 layers: the cost model's first tiling runs 1 % slower than the host round trip;
    the default tries the next estimates on the cycle model (REFINE_BAND) and takes a faster one, which
    the placement then counts and lowering compiles."""
    layer = dict(x_shape=(1, 512, 14, 14), kernel=(3, 3), stride=1, pads=(1,) * 4, bias=True, shift=None,
                 clip=(0, 127), channel_shift=True, bias_gemm=True)
    compute = depthwise_def(PYNQ, n=1, c=512, h=14, w=14, kh=3, kw=3, stride=1, pads=(1,) * 4, bias=True,
                            shift=None, clip=(0, 127), channel_shift=True, bias_gemm=True)
    shape = depthwise_shape(PYNQ, n=1, c=512, h=14, w=14, kh=3, kw=3, stride=1, pads=(1,) * 4, compute=compute)
    first = default_depthwise_knobs(PYNQ, shape)
    op, knobs = compile_depthwise(PYNQ, **layer)
    assert knobs != first
    op_first, _ = compile_depthwise(PYNQ, **layer, schedule=first)
    zeros = {k: np.zeros(op_first.tensors[k].nbytes(PYNQ), np.uint8) for k in op_first.inputs}
    slow = run_compiled(op_first, resolve_device("sim", PYNQ), zeros)[1].cycles
    fast = simulated_cycles(PYNQ, **layer)
    host = host_cycles(PYNQ, shape)
    assert fast < host < slow, (fast, host, slow)
    assert depthwise_choice(PYNQ, **layer) is None


@pytest.mark.parametrize("cfg", [PYNQ, PYNQ_MUL], ids=["pynq", "pynq_mul"])
def test_bias_by_gemm_takes_a_cycle_per_output_entry_off(cfg):
    """A MobileNet-sized 3x3 layer: one GEMM micro-op per entry instead of a two-cycle ALU ADD saves more
    than the digit blocks' loads cost (tiny load-bound layers can lose a few cycles: the load module
    brings the blocks)."""
    layer = dict(x_shape=(1, 64, 28, 28), kernel=(3, 3), stride=1, pads=(1,) * 4, bias=True, shift=0,
                 clip=(0, 127), channel_shift=True, pre_shift=2 if cfg.alu_mul else None)
    entries = 64 * 28 * 28 // cfg.block_out
    gemm, alu = simulated_cycles(cfg, **layer, bias_gemm=True), simulated_cycles(cfg, **layer)
    assert alu - gemm >= 0.5 * entries, (gemm, alu)


@pytest.mark.parametrize("device", ["fsim", "sim"])
def test_a_bias_too_large_for_the_lanes_keeps_the_alu_add(device):
    x, wt, b = operands(24, 9, 9, 3)
    b[5] = 63 + 127 * 127 * 15 + 1                      # one value past what 16 lanes of digits can hold
    assert not bias_fits(PYNQ, b)
    y, _ = ops.depthwise_conv2d(x, wt, padding=1, bias=b, shift=7, clip=(0, 120), device=device)
    assert np.array_equal(y, reference.conv2d(x, wt, 1, 1, b, shift=7, clip=(0, 120), groups=24))
    op, _ = compile_depthwise(PYNQ, x_shape=x.shape, kernel=(3, 3), stride=1, pads=(1,) * 4, bias=True, shift=7,
                              clip=(0, 120), bias_gemm=bias_fits(PYNQ, b))
    assert op.tensors["bias"].mem == MemId.ACC and ONES not in op.tensors


def test_bad_depthwise_arguments_are_one_clear_error():
    x, wt, _ = operands(16, 6, 6, 3)
    with pytest.raises(CompileError, match=r"depthwise weights must be \(16, 1, KH, KW\)"):
        ops.depthwise_conv2d(x, wt[:8], device="fsim")
    with pytest.raises(CompileError, match="does not fit"):
        ops.depthwise_conv2d(x[:, :, :1, :1], wt, device="fsim")
    with pytest.raises(CompileError, match="bad depthwise schedule knobs"):
        ops.depthwise_conv2d(x, wt, schedule={"tile_q": 1}, device="fsim")
    with pytest.raises(CompileError, match="diagonal weight blocks"):
        ops.depthwise_conv2d(x, wt, config=PYNQ.replace(block_in=8, inp_buff_bytes=1 << 14,
                                                       wgt_buff_bytes=1 << 17), device="fsim")
    y, _ = ops.depthwise_conv2d(x, wt, padding=1, shift=4, schedule=DepthwiseKnobs(1, 2, 3, 1), device="fsim")
    assert np.array_equal(y, reference.conv2d(x, wt, 1, 1, shift=4, groups=16))


def test_depthwise_on_the_rtl_within_two_percent_of_the_cycle_model():
    """One depthwise task (stride 2, asymmetric pads, per-channel shifts, the bias by GEMM) on the Verilator
    RTL (build cached)."""
    x, wt, b = operands(24, 11, 11, 3)
    assert bias_fits(PYNQ, b)
    shifts = RNG.integers(4, 12, 24)
    args = dict(stride=2, padding=(0, 0, 1, 1), bias=b, shift=shifts, clip=(0, 127))
    y, rep = ops.depthwise_conv2d(x, wt, device="rtl", **args)
    assert np.array_equal(y, reference.conv2d(x, wt, 2, (0, 0, 1, 1), b, shift=shifts, clip=(0, 127), groups=24))
    assert rep.stats.model == "rtl"
    _, sim = ops.depthwise_conv2d(x, wt, device="sim", **args)
    assert abs(sim.cycles - rep.cycles) <= 0.02 * rep.cycles, (sim.cycles, rep.cycles)
