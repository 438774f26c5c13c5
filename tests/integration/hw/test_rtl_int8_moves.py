"""The int8 operators on pynq's RTL (no LOAD.ACC8, as on VTA): max pooling, the residual add, relu and a
convolution with a fused residual add move their int8 tiles by INP loads and an identity GEMM
(compiler/backends/vta/lowering/move.py); the RTL gives numpy's bits and the cycle model's cycles within 5 %."""

import numpy as np

from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_weight, resolve_device, run_compiled, unpack_activation
from vtakit.isa import HwConfig

PYNQ = HwConfig.preset("pynq")


def _close(rtl_cycles: int, sim_cycles: int) -> bool:
    return abs(rtl_cycles - sim_cycles) <= 0.05 * rtl_cycles


def test_pooling_add_relu_on_rtl_without_acc8():
    assert not PYNQ.acc8_load
    rng = np.random.default_rng(17)
    x = rng.integers(-128, 128, (1, 32, 9, 9), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 32, 9, 9), dtype=np.int8)
    x[0, :, 0, 0] = -128  # padding must never win
    runs = {"max_pool2d": (lambda d: ops.max_pool2d(x, kernel=3, stride=2, padding=1, device=d),
                           reference.max_pool2d(x, 3, 2, 1)),
            "add": (lambda d: ops.add(x, b, shift=1, clip=(0, 127), device=d),
                    reference.add(x, b, shift=1, clip=(0, 127))),
            "relu": (lambda d: ops.relu(x, device=d), reference.relu(x))}
    for name, (run, want) in runs.items():
        y, rep = run("rtl")
        assert np.array_equal(y, want), name
        _, sim = run("sim")
        assert _close(rep.cycles, sim.cycles), (name, rep.cycles, sim.cycles)


def test_conv_with_fused_residual_add_on_rtl():
    rng = np.random.default_rng(18)
    x = rng.integers(-128, 128, (1, 32, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 32, 3, 3), dtype=np.int8)
    res = rng.integers(-128, 128, (1, 32, 8, 8), dtype=np.int8)
    op, _ = compile_conv2d(PYNQ, x_shape=x.shape, w_shape=w.shape, padding=1, shift=9, clip=(-128, 127),
                           residual=(1, (0, 127)))
    inputs = {"data": pack_activation(x, 1, 16), "weight": pack_weight(w, 16, 16), "res": pack_activation(res, 1, 16)}
    want = reference.add(reference.conv2d(x, w, 1, 1, shift=9, clip=(-128, 127)), res, shift=1, clip=(0, 127))
    cycles = {}
    for device in ("rtl", "sim"):
        out, stats = run_compiled(op, resolve_device(device, PYNQ), inputs)
        assert np.array_equal(unpack_activation(out, 1, 32), want), device
        cycles[device] = stats.cycles
    assert _close(cycles["rtl"], cycles["sim"]), cycles
