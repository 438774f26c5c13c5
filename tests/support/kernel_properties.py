"""Kernel properties shared by the CPU backend and the emulated GPU backend, with their numpy references.

Each `*_property(backend)` returns prop(case): build the case's arrays, run
the kernel through `backend` (guarded), compare with an independent numpy
reference.  Integer results must match bit for bit; float32 results too when
the data are dyadic (see `sweep.float_data`), otherwise within the worst-case
float32 summation error.  The GEMM-like references here use float64 im2col
and matmul, which is exact for int8 operands and for dyadic data, and fast
enough for channel counts above 1,000; `cpu_reference` provides the rest.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.support import cpu_reference as ref
import numpy as np
from tests.support.sweep import U32, Backend, assert_float, assert_same, assert_sum_close, data, float_data, int8_data, with_specials

Property = Callable[[dict], None]
EXACT_TERMS = 16384  # dyadic sums of up to this many products are exact in float32


def conv2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride, pads, dilation, groups: int,
                     shift=None, clip=None) -> np.ndarray:
    """ONNX Conv by float64 im2col and one matmul per group (exact for int8: sums stay far below 2**53)."""
    n, c, h, width = x.shape
    o, cg, kh, kw = w.shape
    oh = ref.out_len(h, kh, stride[0], pads[0], pads[2], dilation[0])
    ow = ref.out_len(width, kw, stride[1], pads[1], pads[3], dilation[1])
    padded = np.zeros((n, c, h + pads[0] + pads[2], width + pads[1] + pads[3]))
    padded[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + width] = x
    rows = (np.arange(kh) * dilation[0])[:, None] + (np.arange(oh) * stride[0])[None, :]    # (kh, oh)
    cols = (np.arange(kw) * dilation[1])[:, None] + (np.arange(ow) * stride[1])[None, :]    # (kw, ow)
    patches = padded[:, :, rows[:, None, :, None], cols[None, :, None, :]]                  # (n, c, kh, kw, oh, ow)
    patches = patches.reshape(n, groups, cg * kh * kw, oh * ow)
    weights = w.astype(np.float64).reshape(1, groups, o // groups, cg * kh * kw)
    y = np.matmul(weights, patches).reshape(n, o, oh, ow)
    if bias is not None:
        y = y + bias.astype(np.float64)[None, :, None, None]
    return ref.requant(y.astype(np.int64), shift, clip) if x.dtype == np.int8 else y


def _requant_options(case: dict) -> dict:
    return {k: case[k] for k in ("shift", "clip") if case[k] is not None}


def conv2d_property(backend: Backend) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        integer = case["dtype"] == "int8"
        make = (lambda shape: int8_data(rng, shape, case["style"])) if integer else \
            (lambda shape: float_data(rng, shape, case["style"]))
        x, w = make(case["x"]), make(case["w"])
        outputs = case["w"][0]
        bias = None
        if case["bias"]:
            bias = rng.integers(-20000, 20000, outputs).astype(np.int32) if integer else make((outputs,))
        geometry = dict(stride=case["stride"], pads=case["pads"], dilation=case["dilation"], groups=case["groups"])
        got = backend("conv2d", x, w, bias, **geometry, **_requant_options(case))
        want = conv2d_reference(x, w, bias, **geometry, shift=case["shift"], clip=case["clip"])
        if integer:
            assert_same(got, want)
            return
        terms = w[0].size + 1
        exact = case["style"] == "dyadic" and terms <= EXACT_TERMS
        bound = None if exact else conv2d_reference(np.abs(x), np.abs(w), None if bias is None else np.abs(bias),
                                                    **geometry)
        assert_float(got, want, exact, bound, terms)
    return prop


def dense_property(backend: Backend) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        integer = case["dtype"] == "int8"
        make = (lambda shape: int8_data(rng, shape, case["style"])) if integer else \
            (lambda shape: float_data(rng, shape, case["style"]))
        x, w = make((case["batch"], case["inputs"])), make((case["outputs"], case["inputs"]))
        bias = None
        if case["bias"]:
            outputs = case["outputs"]
            bias = rng.integers(-20000, 20000, outputs).astype(np.int32) if integer else make((outputs,))
        got = backend("dense", x, w, bias, **_requant_options(case))
        want = x.astype(np.float64) @ w.astype(np.float64).T + (0 if bias is None else bias.astype(np.float64))
        if integer:
            assert_same(got, ref.requant(want.astype(np.int64), case["shift"], case["clip"]))
            return
        exact = case["style"] == "dyadic" and case["inputs"] + 1 <= EXACT_TERMS
        bound = np.abs(x).astype(np.float64) @ np.abs(w).T + (0 if bias is None else np.abs(bias))
        assert_float(got, want, exact, bound, case["inputs"] + 1)
    return prop


def matmul_property(backend: Backend) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        a, b = float_data(rng, case["a"], case["style"]), float_data(rng, case["b"], case["style"])
        got = backend("matmul", a, b)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        terms = case["a"][-1]
        exact = case["style"] == "dyadic" and terms <= EXACT_TERMS
        assert_float(got, want, exact, np.matmul(np.abs(a).astype(np.float64), np.abs(b)), terms)
    return prop


# -- elementwise ------------------------------------------------------------------------------------

def binary_property(backend: Backend, name: str, op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Property:
    """float32 add/sub/mul with broadcasting: one IEEE operation per element, so bit for bit (NaN, inf too)."""
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        a, b = (with_specials(rng, float_data(rng, s, "normal")) for s in case["shapes"])
        with np.errstate(all="ignore"):
            want = op(a, b)
        assert_same(backend(name, a, b), want)
    return prop


def unary_property(backend: Backend, name: str) -> Property:
    """relu, clip, quantize, dequantize against numpy in the kernel's own precision (bit for bit)."""
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        dtype = case["dtype"]
        if dtype == "float32":
            x = with_specials(rng, 10 * float_data(rng, case["x"], "normal"), nan=name != "quantize")
        else:
            x = data(rng, case["x"], dtype)
        with np.errstate(all="ignore"):
            if name == "relu":
                got, want = backend("relu", x), np.maximum(x, x.dtype.type(0))
            elif name == "clip":
                low, high = (x.dtype.type(v) for v in (case["lo"], case["hi"]))
                got, want = backend("clip", x, case["lo"], case["hi"]), np.minimum(np.maximum(x, low), high)
            elif name == "quantize":
                got, want = backend("quantize", x, case["exp"]), ref.quantize(x, case["exp"])
            else:
                got, want = backend("dequantize", x, case["exp"]), ref.dequantize(x, case["exp"])
        assert_same(got, want)
    return prop


def add_int8_property(backend: Backend) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        a, b = (int8_data(rng, s) for s in case["shapes"])
        got = backend("add_int8", a, b, shift=case["shift"], clip=case["clip"])
        assert_same(got, ref.add_int8(a, b, case["shift"], case["clip"]))
    return prop


def batch_norm_property(backend: Backend) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        x = float_data(rng, case["x"], case["style"])
        channels = case["x"][1]
        scale, bias, mean = (float_data(rng, (channels,), "normal") for _ in range(3))
        var = np.abs(float_data(rng, (channels,), "normal")) + np.float32(0.01)
        got = backend("batch_norm", x, scale, bias, mean, var, case["eps"])
        want = ref.batch_norm(x, scale, bias, mean, var, case["eps"])
        shape = (1, -1, 1, 1)
        factor = np.abs(scale / np.sqrt(var + case["eps"])).reshape(shape)
        magnitude = (np.abs(x) + np.abs(mean).reshape(shape)) * factor
        assert_sum_close(got, want, magnitude.astype(np.float64) + np.abs(bias).reshape(shape), 8)
    return prop


def softmax_property(backend: Backend) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        x = case["scale"] * float_data(rng, case["x"], "normal")
        got = backend("softmax", x, axis=case["axis"])
        want = ref.softmax(x, axis=case["axis"])
        assert got.dtype == np.float32 and got.shape == want.shape
        # relative error: exp's argument (x - max) rounded, the polynomial, the sum over the axis, the division
        distance = np.abs(x - x.max(axis=case["axis"], keepdims=True)).astype(np.float64)
        tolerance = 2 * U32 * (distance + case["x"][case["axis"]] + 8) * want + 2e-38  # + float32's smallest normal
        assert (np.abs(got - want) <= tolerance).all(), np.max(np.abs(got - want) - tolerance)
    return prop


# -- pooling ------------------------------------------------------------------------------------------

def pool_property(backend: Backend, kind: str) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        integer = case["dtype"] == "int8"
        x = int8_data(rng, case["x"], case["style"]) if integer else float_data(rng, case["x"], case["style"])
        window = dict(kernel=case["kernel"], stride=case["stride"], pads=case["pads"], ceil_mode=case["ceil_mode"])
        if kind == "max":
            got = backend("max_pool2d", x, **window, dilation=case["dilation"])
            assert_same(got, ref.max_pool2d(x, **window, dilation=case["dilation"]))
            return
        got = backend("avg_pool2d", x, **window, count_include_pad=case["count_include_pad"])
        want = ref.avg_pool2d(x, **window, count_include_pad=case["count_include_pad"])
        if integer:
            assert_same(got, want)
        else:
            bound = ref.avg_pool2d(np.abs(x), **window, count_include_pad=case["count_include_pad"])
            assert_float(got, want, case["style"] == "dyadic", bound, case["kernel"][0] * case["kernel"][1] + 1)
    return prop


def global_avg_pool_property(backend: Backend) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        integer = case["dtype"] == "int8"
        x = int8_data(rng, case["x"], case["style"]) if integer else float_data(rng, case["x"], case["style"])
        got, want = backend("global_avg_pool", x), ref.global_avg_pool(x)
        if integer:
            assert_same(got, want)
        else:
            terms = case["x"][2] * case["x"][3] + 1
            exact = case["style"] == "dyadic" and terms <= EXACT_TERMS
            assert_float(got, want, exact, ref.global_avg_pool(np.abs(x)), terms)
    return prop


# -- layout -------------------------------------------------------------------------------------------

def unpack_reference(y: np.ndarray, n: int, c: int) -> np.ndarray:
    """Element by element: out[i, j] = y[i // b, j // block, :, :, i % b, j % block]."""
    _, _, h, w, batch, block = y.shape
    out = np.zeros((n, c, h, w), y.dtype)
    for i in range(n):
        for j in range(c):
            out[i, j] = y[i // batch, j // block, :, :, i % batch, j % block]
    return out


def layout_property(backend: Backend, name: str) -> Property:
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        if name == "transpose":
            x = data(rng, case["x"], case["dtype"])
            got, want = backend("transpose", x, case["perm"]), np.ascontiguousarray(np.transpose(x, case["perm"]))
        elif name == "pad":
            x = data(rng, case["x"], case["dtype"])
            rank = x.ndim
            widths = list(zip(case["pads"][:rank], case["pads"][rank:]))
            got = backend("pad", x, case["pads"], case["value"])
            want = np.pad(x, widths, constant_values=np.array(case["value"]).astype(x.dtype))
        elif name == "concat":
            parts = [data(rng, shape, case["dtype"]) for shape in case["parts"]]
            got, want = backend("concat", parts, case["axis"]), np.concatenate(parts, axis=case["axis"])
        elif name == "pack_activation":
            x = data(rng, case["x"], case["dtype"])
            got = backend("pack_activation", x, case["batch"], case["block"])
            want = ref.pack_activation(x, case["batch"], case["block"])
        else:
            n, c, h, w = case["x"]
            packed = (-(-n // case["batch"]), -(-c // case["block"]), h, w, case["batch"], case["block"])
            y = data(rng, packed, case["dtype"])
            got, want = backend("unpack_activation", y, n, c), unpack_reference(y, n, c)
        assert_same(got, want)
    return prop


def linear_quant_property(backend: Backend, name: str) -> Property:
    """ONNX QuantizeLinear / DequantizeLinear (GPU backend only), in numpy's float32 arithmetic: bit for bit."""
    def prop(case: dict) -> None:
        rng = np.random.default_rng(case["seed"])
        scale, zero_point, dtype = np.float32(case["scale"]), case["zero_point"], np.dtype(case["dtype"])
        if name == "quantize_linear":
            x = with_specials(rng, 10 * float_data(rng, case["x"], "normal"), nan=False)
            info = np.iinfo(dtype)
            with np.errstate(all="ignore"):
                want = np.clip(np.rint(x / scale) + np.float32(zero_point), info.min, info.max).astype(dtype)
            got = backend("quantize_linear", x, case["scale"], zero_point, dtype)
        else:
            x = data(rng, case["x"], dtype.name)
            want = (x.astype(np.int32) - zero_point).astype(np.float32) * scale
            got = backend("dequantize_linear", x, case["scale"], zero_point)
        assert_same(got, want)
    return prop
