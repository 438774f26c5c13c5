"""Hypothesis strategies for kernel cases: shapes and parameters, awkward ones on purpose.

Channel counts mix 1, primes, powers of two and arbitrary values, and now and
then exceed 1,000; spatial sizes give output planes below and above the GEMM
panel width (16 columns on AVX2, 32 on AVX-512); every stride, pad, dilation,
group and requantisation option the kernels accept appears.  Each strategy
takes size limits, so the emulated GPU kernels (one OS thread per GPU thread)
can draw smaller cases than the CPU ones; the limits keep one example to a
fraction of a second, most of it JIT compilation.
"""

from __future__ import annotations

import math

from tests.support import cpu_reference as ref
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

AWKWARD = (1, 2, 3, 5, 7, 8, 11, 13, 16, 17, 19, 23, 29, 31, 32, 37, 41, 61, 64)
BIG = (1009, 1024, 1031, 1063, 1152)
SEEDS = st.integers(0, 2**32 - 1)
LAYOUT_DTYPES = ("float32", "int8", "int32", "uint8", "int16", "int64", "float64")


def rarely(draw, percent: int) -> bool:
    """True about `percent`% of the time (a middle range of integers, which hypothesis does not favour)."""
    return 37 <= draw(st.integers(0, 99)) < 37 + percent


def channels(draw, limit: int, big_percent: int = 0) -> int:
    if big_percent and rarely(draw, big_percent):
        return draw(st.sampled_from(BIG))
    return draw(st.one_of(st.sampled_from([c for c in AWKWARD if c <= limit]), st.integers(1, limit)))


def requant(draw) -> dict:
    """int8 output options: none (int32 out), shift only, clip only, or both."""
    mode = draw(st.sampled_from(("int32", "shift", "clip", "both")))
    out: dict = {"shift": None, "clip": None}
    if mode in ("shift", "both"):
        out["shift"] = draw(st.one_of(st.integers(0, 12), st.integers(0, 31)))
    if mode in ("clip", "both"):
        low = draw(st.integers(-128, 127))
        out["clip"] = (low, draw(st.integers(low, 127)))
    return out


def element_style(draw, dtype: str) -> str:
    if dtype == "int8":
        return draw(st.sampled_from(("uniform", "uniform", "extreme", "small")))
    return draw(st.sampled_from(("dyadic", "dyadic", "normal")))


def fit(size: int, kernel: int, dilation: int, pad_total: int) -> int:
    """The smallest input length >= size that one window fits (with padding)."""
    return max(size, dilation * (kernel - 1) + 1 - pad_total, 1)


def gpu_gemm_cost(m: int, n: int, k: int, batches: int = 1) -> int:
    """Blocks x 16-deep K steps of the GPU's tiled GEMM: emulated, each costs ~20 ms (256 OS threads, 2 barriers)."""
    from vtakit.compiler.backends.cuda.gemm import choose_tile

    return choose_tile(m, n, batches).blocks(m, n) * batches * math.ceil(k / 16)


@st.composite
def conv_cases(draw, depthwise: bool, max_channels: int = 64, max_size: int = 20, big_percent: int = 4,
               max_macs: int = 4_000_000, max_blocks: int | None = None, max_big_blocks: int | None = None) -> dict:
    """conv2d: the generic im2col/GEMM path (groups with >= 2 channels each) or the depthwise one.

    max_blocks bounds the GPU's tiled kernel (see `gpu_gemm_cost`), max_big_blocks the cases with more than
    1,000 channels (default: the same)."""
    dtype = draw(st.sampled_from(("int8", "float32")))
    big = rarely(draw, big_percent)
    small = 8 if big else max_channels
    if depthwise:
        c = draw(st.sampled_from(BIG)) if big else max(2, channels(draw, max_channels))
        groups, multiplier = c, draw(st.sampled_from((1, 1, 2, 3)))
        group_in, group_out = 1, multiplier
    else:
        groups = 1 if big else draw(st.sampled_from((1, 1, 1, 2, 3, 4)))
        group_in, group_out = channels(draw, small), channels(draw, small)
        if big and draw(st.booleans()):
            group_in = draw(st.sampled_from(BIG))
        elif big:
            group_out = draw(st.sampled_from(BIG))
        if groups > 1:
            group_in = max(group_in, 2)  # one channel per group is the depthwise path
    limit = 3 if big else 5
    kernel = (draw(st.integers(1, limit)), draw(st.integers(1, limit)))
    if not big and rarely(draw, 5):
        kernel = (7, 7)
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    size_limit = 7 if big else max_size
    h = fit(draw(st.integers(1, size_limit)), kernel[0], dilation[0], pads[0] + pads[2])
    w = fit(draw(st.integers(1, size_limit)), kernel[1], dilation[1], pads[1] + pads[3])
    batch = draw(st.sampled_from((1, 1, 1, 2, 3)))
    out_h = ref.out_len(h, kernel[0], stride[0], pads[0], pads[2], dilation[0])
    out_w = ref.out_len(w, kernel[1], stride[1], pads[1], pads[3], dilation[1])
    c, o = groups * group_in, groups * group_out
    reduction = group_in * kernel[0] * kernel[1]
    assume(batch * o * out_h * out_w * reduction <= max_macs)
    if max_blocks is not None and not depthwise:
        limit = max_big_blocks or max_blocks if big else max_blocks
        assume(gpu_gemm_cost(group_out, batch * out_h * out_w, reduction, groups) <= limit)
    case = dict(dtype=dtype, x=(batch, c, h, w), w=(o, group_in, *kernel), groups=groups, stride=stride, pads=pads,
                dilation=dilation, bias=draw(st.booleans()), style=element_style(draw, dtype), seed=draw(SEEDS))
    case.update(requant(draw) if dtype == "int8" else {"shift": None, "clip": None})
    return case


@st.composite
def dense_cases(draw, max_batch: int = 9, max_inputs: int = 300, max_outputs: int = 70,
                big_percent: int = 5, max_blocks: int | None = None, max_big_blocks: int | None = None) -> dict:
    dtype = draw(st.sampled_from(("int8", "float32")))
    batch = draw(st.one_of(st.integers(1, max_batch), st.sampled_from((1, 2, 3))))
    inputs = channels(draw, max_inputs, big_percent)
    outputs = channels(draw, max_outputs, big_percent if inputs < 1000 else 0)
    if max_blocks is not None:
        limit = max_big_blocks or max_blocks if max(inputs, outputs) > 1000 else max_blocks
        assume(gpu_gemm_cost(outputs, batch, inputs) <= limit)
    case = dict(dtype=dtype, batch=batch, inputs=inputs, outputs=outputs, bias=draw(st.booleans()),
                style=element_style(draw, dtype), seed=draw(SEEDS))
    case.update(requant(draw) if dtype == "int8" else {"shift": None, "clip": None})
    return case


@st.composite
def matmul_cases(draw, max_side: int = 70, big_percent: int = 5, max_flops: int = 3_000_000,
                 max_blocks: int | None = None, max_big_blocks: int | None = None) -> dict:
    """a (..., m, k) @ b (..., k, n) with broadcast batch dimensions, or a 1-D operand on either side."""
    batch_a, batch_b = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3)).input_shapes
    m, k, n = channels(draw, max_side), channels(draw, max_side, big_percent), channels(draw, max_side, big_percent)
    a_shape, b_shape = (*batch_a, m, k), (*batch_b, k, n)
    vector = draw(st.sampled_from(("none", "none", "none", "a", "b")))
    if vector == "a":
        a_shape = (k,)
    elif vector == "b":
        b_shape = (k,)
    batch = math.prod(batch_a) * math.prod(batch_b)
    assume(batch * m * k * n <= max_flops)
    if max_blocks is not None:
        limit = max_big_blocks or max_blocks if max(k, n) > 1000 else max_blocks
        assume(gpu_gemm_cost(m, n, k, batch) <= limit)
    return dict(a=a_shape, b=b_shape, style=draw(st.sampled_from(("dyadic", "dyadic", "normal"))), seed=draw(SEEDS))


def _windows_nonempty(size: int, kernel: int, stride: int, pad: int, out: int, dilation: int) -> bool:
    """Every window along one axis covers at least one input element."""
    return all(any(0 <= i * stride - pad + a * dilation < size for a in range(kernel)) for i in range(out))


@st.composite
def pool_cases(draw, kind: str, max_channels: int = 40, max_size: int = 20, big_percent: int = 4) -> dict:
    """max_pool2d (with dilation) or avg_pool2d (with count_include_pad); pads below the window size."""
    dtype = draw(st.sampled_from(("int8", "float32")))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if kind == "max" else (1, 1)
    pads = tuple(draw(st.integers(0, kernel[i % 2] - 1)) for i in range(4))
    ceil_mode = draw(st.booleans())
    h = fit(draw(st.integers(1, max_size)), kernel[0], dilation[0], pads[0] + pads[2])
    w = fit(draw(st.integers(1, max_size)), kernel[1], dilation[1], pads[1] + pads[3])
    out = [ref.out_len(size, kernel[i], stride[i], pads[i], pads[i + 2], dilation[i], ceil_mode)
           for i, size in enumerate((h, w))]
    assume(min(out) >= 1)
    assume(all(_windows_nonempty(size, kernel[i], stride[i], pads[i], out[i], dilation[i])
               for i, size in enumerate((h, w))))
    case = dict(dtype=dtype, x=(draw(st.sampled_from((1, 1, 2))), channels(draw, max_channels, big_percent), h, w),
                kernel=kernel, stride=stride, pads=pads, ceil_mode=ceil_mode, style=element_style(draw, dtype),
                seed=draw(SEEDS))
    if kind == "max":
        case["dilation"] = dilation
    else:
        case["count_include_pad"] = draw(st.booleans())
    return case


@st.composite
def nchw_cases(draw, dtypes: tuple[str, ...], max_channels: int = 64, max_size: int = 24,
               big_percent: int = 5) -> dict:
    """One NCHW tensor (global_avg_pool, batch_norm)."""
    dtype = draw(st.sampled_from(dtypes))
    shape = (draw(st.sampled_from((1, 1, 2, 3))), channels(draw, max_channels, big_percent),
             draw(st.integers(1, max_size)), draw(st.integers(1, max_size)))
    return dict(dtype=dtype, x=shape, style=element_style(draw, dtype), seed=draw(SEEDS))


def shapes(max_dims: int = 5, max_side: int = 9, big_percent: int = 5, big_side: int = 1031):
    """Array shapes of rank 1..max_dims; now and then one side of `big_side`."""
    @st.composite
    def draw_shape(draw) -> tuple[int, ...]:
        shape = list(draw(hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=max_side)))
        if rarely(draw, big_percent):
            shape[draw(st.integers(0, len(shape) - 1))] = big_side
            assume(math.prod(shape) <= 60_000)
        return tuple(shape)
    return draw_shape()


@st.composite
def broadcast_pairs(draw, max_side: int = 9, big_percent: int = 5) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast (numpy rules: missing leading dimensions, ones)."""
    base = draw(shapes(5, max_side, big_percent))
    pair = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, base_shape=base, min_side=1, max_dims=len(base) + 1))
    assume(math.prod(pair.result_shape) <= 120_000)
    return pair.input_shapes


@st.composite
def softmax_cases(draw, max_side: int = 12, big_percent: int = 6, max_rows: int | None = None) -> dict:
    """max_rows bounds the rows (outer x inner) reduced: the GPU kernel runs one block with barriers per row."""
    shape = list(draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=max_side)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    if rarely(draw, big_percent):
        shape[axis] = draw(st.sampled_from(BIG + (3001,)))
        assume(math.prod(shape) <= 40_000)
    if max_rows is not None:
        assume(math.prod(shape) // shape[axis] <= max_rows)
    return dict(x=tuple(shape), axis=axis, scale=draw(st.sampled_from((1.0, 4.0, 50.0))), seed=draw(SEEDS))


@st.composite
def transpose_cases(draw, max_side: int = 40, max_size: int = 40_000) -> dict:
    """Rank 1..6, sides around the in-register transpose blocks (4 to 16 elements) and their ragged edges."""
    rank = draw(st.integers(1, 6))
    side = st.one_of(st.integers(1, 4), st.integers(1, max_side))
    shape = tuple(draw(side) for _ in range(rank))
    assume(math.prod(shape) <= max_size)
    return dict(x=shape, perm=tuple(draw(st.permutations(range(rank)))), dtype=draw(st.sampled_from(LAYOUT_DTYPES)),
                seed=draw(SEEDS))


@st.composite
def pad_cases(draw) -> dict:
    shape = draw(shapes(5, 8, 3))
    dtype = draw(st.sampled_from(LAYOUT_DTYPES))
    value = draw(st.sampled_from((0, 1, -1, 7, -128)))
    if dtype == "uint8" and value < 0:
        value = 255 + value + 1
    if dtype in ("float32", "float64") and rarely(draw, 20):
        value = draw(st.sampled_from((-2.5, float("nan"), float("-inf"))))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(2 * len(shape)))
    return dict(x=shape, pads=pads, value=value, dtype=dtype, seed=draw(SEEDS))


@st.composite
def concat_cases(draw) -> dict:
    shape = list(draw(shapes(4, 8, 3)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    sizes = draw(st.lists(st.one_of(st.integers(1, 5), st.integers(1, 40)), min_size=1, max_size=5))
    parts = [tuple(shape[:axis % len(shape)] + [s] + shape[axis % len(shape) + 1:]) for s in sizes]
    assume(sum(math.prod(p) for p in parts) <= 120_000)
    return dict(parts=parts, axis=axis, dtype=draw(st.sampled_from(LAYOUT_DTYPES)), seed=draw(SEEDS))


@st.composite
def packing_cases(draw, big_percent: int = 4) -> dict:
    """pack_activation / unpack_activation: batch and channel counts that do or do not fill their blocks."""
    block = draw(st.sampled_from((1, 2, 4, 8, 16, 32)))
    batch = draw(st.sampled_from((1, 1, 2, 4)))
    n, c = draw(st.integers(1, 5)), channels(draw, 70, big_percent)
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    return dict(x=(n, c, h, w), batch=batch, block=block, dtype=draw(st.sampled_from(("int8", "float32", "int32"))),
                seed=draw(SEEDS))


@st.composite
def elementwise_cases(draw, kind: str, max_side: int = 9) -> dict:
    """binary (float32 add/sub/mul), relu, clip, quantize, dequantize, add_int8, quantize_linear,
    dequantize_linear: shapes and parameters."""
    exponents = st.one_of(st.integers(-12, 12), st.integers(-126, 126))
    if kind in ("binary", "add_int8"):
        case: dict = dict(shapes=draw(broadcast_pairs(max_side)))
    else:
        case = dict(x=draw(shapes(5, max_side)))
    if kind == "relu":
        case["dtype"] = draw(st.sampled_from(("float32", "int8", "int32")))
    elif kind == "clip":
        case["dtype"] = draw(st.sampled_from(("float32", "int8")))
        bound = st.integers(-128, 127) if case["dtype"] == "int8" else \
            st.floats(-4, 4, width=32) | st.sampled_from((0.0, -0.0, 6.0))
        case["lo"], case["hi"] = sorted((draw(bound), draw(bound))) if draw(st.integers(0, 9)) else \
            (draw(bound), draw(bound))  # now and then lo > hi: np.clip semantics, hi wins
    elif kind == "quantize":
        case.update(dtype="float32", exp=draw(exponents))
    elif kind == "dequantize":
        case.update(dtype=draw(st.sampled_from(("int8", "int32"))), exp=draw(exponents))
    elif kind in ("quantize_linear", "dequantize_linear"):
        case["dtype"] = draw(st.sampled_from(("int8", "uint8")))
        case["scale"] = draw(st.sampled_from((0.05, 0.1, 1 / 3, 2.0, 1e-3)))
        case["zero_point"] = draw(st.integers(-128, 127) if case["dtype"] == "int8" else st.integers(0, 255))
    elif kind == "add_int8":
        low = draw(st.integers(-128, 127))
        case.update(shift=draw(st.one_of(st.integers(0, 3), st.integers(0, 31))),
                    clip=(low, draw(st.integers(low, 127))))
    case["seed"] = draw(SEEDS)
    return case


@st.composite
def batch_norm_cases(draw, max_channels: int = 64, max_size: int = 12) -> dict:
    case = draw(nchw_cases(("float32",), max_channels, max_size))
    case["eps"] = draw(st.sampled_from((1e-5, 1e-3, 0.0, 0.1)))
    return case
