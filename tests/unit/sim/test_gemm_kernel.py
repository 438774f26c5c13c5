"""The vectorised GEMM kernel against a micro-op-by-micro-op loop.

`GemmKernel.accumulate` takes a matrix-product path for convolution-shaped
micro-op streams (every destination gets the same sequence of weight entries
per output-channel block) and a scatter path for everything else; both must give
the wrapping int32 result of the sequential loop, whatever the order of the
micro-ops, the batch, and operands at the extremes of int8.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.isa.config import PRESETS
from vtakit.sim.kernels import GemmKernel
from vtakit.sim.plans import conv_blocks


def sequential(acc, inp, wgt_buf, dst, src, wgt):
    out = acc.astype(np.int64)
    for d, s, w in zip(dst.tolist(), src.tolist(), wgt.tolist()):
        out[d] += inp[s].astype(np.int64) @ wgt_buf[w].astype(np.int64).T
    return ((out + 2**31) % 2**32 - 2**31).astype(np.int32)


def conv_stream(rng, pixels: int, taps: int, groups: int, *, order: str):
    """dst/src/wgt of a convolution-like GEMM: `groups` output blocks, `taps` weight entries each."""
    dst, src, wgt = [], [], []
    for g in range(groups):
        for p in range(pixels):
            for t in range(taps):
                dst.append(g * pixels + p)
                src.append((p + t) % 64)
                wgt.append(g * taps + t)
    dst, src, wgt = (np.array(v, dtype=np.int64) for v in (dst, src, wgt))
    if order == "pixel-major":  # every tap of a pixel in a row, groups interleaved per pixel
        key = np.argsort((dst % pixels) * groups + dst // pixels, kind="stable")
    elif order == "shuffled":
        key = rng.permutation(dst.size)
    else:
        key = np.arange(dst.size)
    return dst[key], src[key], wgt[key]


def operands(rng, cfg, extreme: bool):
    shape_i = (64, cfg.batch, cfg.block_in)
    shape_w = (256, cfg.block_out, cfg.block_in)
    if extreme:  # every product is +2**14: the longest sums leave float32's exact range
        return np.full(shape_i, -128, np.int8), np.full(shape_w, -128, np.int8)
    return (rng.integers(-128, 128, shape_i, dtype=np.int8), rng.integers(-128, 128, shape_w, dtype=np.int8))


@pytest.mark.parametrize("preset", ["pynq", "2x16", "1x8"])
@pytest.mark.parametrize("order", ["pixel-major", "group-major", "shuffled"])
@pytest.mark.parametrize("taps,extreme", [(9, False), (36, False), (72, True), (1, False)])
def test_accumulate_matches_the_sequential_loop(preset, order, taps, extreme):
    cfg = PRESETS[preset]
    rng = np.random.default_rng(taps * 7 + len(order))
    kernel = GemmKernel(cfg)
    inp, wgt_buf = operands(rng, cfg, extreme)
    dst, src, wgt = conv_stream(rng, pixels=24, taps=taps, groups=3, order=order)
    acc = rng.integers(-2**31, 2**31, (128, cfg.batch, cfg.block_out), dtype=np.int64).astype(np.int32)
    acc[:8] = 2**31 - 5  # wraps
    expected = sequential(acc, inp, wgt_buf, dst, src, wgt)
    inp_f, wgt_f = inp.astype(kernel.float_dtype), wgt_buf.astype(kernel.float_dtype)
    got = acc.copy()
    kernel.accumulate(got, inp_f, wgt_f, dst, src, wgt)
    assert np.array_equal(got, expected)
    direct = acc.copy()  # the stream has the convolution pattern: the matrix-product path takes it
    blocks = conv_blocks(dst, src, wgt)
    assert blocks is not None
    assert kernel.accumulate_blocks(direct, inp_f, wgt_f, blocks)
    assert np.array_equal(direct, expected)


@pytest.mark.parametrize("case", ["different-later-taps", "uneven-runs", "repeated-heads"])
def test_streams_outside_the_matrix_product_pattern(case):
    """Streams that look convolution-like but are not still accumulate exactly."""
    cfg = PRESETS["pynq"]
    rng = np.random.default_rng(3)
    kernel = GemmKernel(cfg)
    inp, wgt_buf = operands(rng, cfg, extreme=False)
    dst, src, wgt = conv_stream(rng, pixels=16, taps=9, groups=2, order="pixel-major")
    if case == "different-later-taps":
        wgt = wgt.copy()
        wgt[20] = 50  # one pixel's third tap uses another weight entry than its group's
    elif case == "uneven-runs":
        dst, src, wgt = dst[:-1], src[:-1], wgt[:-1]
    else:  # the same pixel appears in two separate runs
        dst = dst.copy()
        dst[9:18] = dst[0]
    acc = np.zeros((64, 1, 16), np.int32)
    expected = sequential(acc, inp, wgt_buf, dst, src, wgt)
    inp_f, wgt_f = inp.astype(kernel.float_dtype), wgt_buf.astype(kernel.float_dtype)
    assert conv_blocks(dst, src, wgt) is None
    kernel.accumulate(acc, inp_f, wgt_f, dst, src, wgt)
    assert np.array_equal(acc, expected)


def test_one_blas_thread_while_simulating_and_restored_after():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from vtakit.sim.kernels import one_blas_thread

    def numpy_blas() -> list[int]:  # numpy's own BLAS: the one the kernels' products call
        return [p["num_threads"] for p in threadpoolctl.threadpool_info()
                if p["user_api"] == "blas" and "numpy" in p["filepath"]]

    before = numpy_blas()
    if not before:
        pytest.skip("numpy's BLAS is not one threadpoolctl knows")
    with one_blas_thread():
        inside = numpy_blas()
    assert inside == [1] * len(before) and numpy_blas() == before


@pytest.mark.parametrize("shr_bits", [5, 6])
def test_shr_by_an_immediate_equals_shr_by_a_vector(shr_bits):
    """The immediate SHR takes one shift; it must read the amount (sign, wrap) as the vector form does."""
    from vtakit.isa.opcodes import AluOp
    from vtakit.sim.kernels import alu_apply

    x = np.array([[-2**31, -1, 0, 1, 2**31 - 1, 12345, -98765]], np.int32)
    for imm in range(-80, 80):
        vector = np.full(x.shape, imm, np.int64)
        assert np.array_equal(alu_apply(AluOp.SHR, x, imm, np.dtype(np.int32), shr_bits),
                              alu_apply(AluOp.SHR, x, vector, np.dtype(np.int32), shr_bits)), imm
