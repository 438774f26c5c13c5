"""CPU backend: the host kernels, native (LLVM IR compiled by llvmlite, or prebuilt) or a numpy fallback.

Each public function validates its numpy arguments (raising `CompileError`
with op set to the kernel's name) and returns a fresh array; inputs are never
modified.  The native kernels (`native.py`: one kernel specialised on shapes,
dtype and parameters, found on first use: `jit.py`) run where llvmlite is
installed (compiled once per CPU and kept on disk) or where a module brought a
library prebuilt for this CPU (`aot.py`: a board, which has no llvmlite); a call
whose kernel neither can provide runs on the numpy kernels of `numpy_kernels.py`
(same names), and `implementation()` counts it.  Without either, every call
runs on numpy.  VTAKIT_HOST_KERNELS=numpy (or `select("numpy")`) chooses the
fallback where both exist.  Integer paths are bit-exact in both; float32 paths
differ from numpy only by summation order.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from vtakit.compiler.backends.cpu import jit, native, numpy_kernels
from vtakit.compiler.backends.cpu.jit import CacheInfo, KernelUnavailable, cache_info, clear_cache, host_target  # noqa: F401
from vtakit.errors import ConfigError

CHOICES = ("native", "numpy")
_active = None  # the implementation in use: native or numpy_kernels (chosen on first use)
_chosen: str | None = None  # an explicit choice (select's argument or VTAKIT_HOST_KERNELS)
_fallbacks: dict[str, int] = {}  # kernel name -> calls the numpy kernels ran because no native kernel was here
_recording: list | None = None


def native_available() -> bool:
    """Native kernels run here: llvmlite builds them, or a loaded module brought them prebuilt for this CPU."""
    return jit.can_build() or jit.prebuilt_target() is not None


def select(choice: str | None = None) -> str:
    """Use the native kernels or the numpy ones ("native" / "numpy"; None: VTAKIT_HOST_KERNELS, else
    native where they are available); returns the label of the implementation now in use."""
    global _active, _chosen
    choice = choice if choice is not None else os.environ.get("VTAKIT_HOST_KERNELS") or None
    if choice is not None and choice not in CHOICES:
        raise ConfigError(f"VTAKIT_HOST_KERNELS must be one of {', '.join(CHOICES)}, got {choice[:40]!r}")
    if choice == "native" and not native_available():
        raise ConfigError("native host kernels need llvmlite or a module holding kernels built for this CPU "
                          "(vtakit compile --host-targets), and neither is here (unset VTAKIT_HOST_KERNELS to run "
                          "the numpy fallback)")
    _chosen = choice
    _active = numpy_kernels if choice == "numpy" or not native_available() else native
    return implementation()


def reselect() -> None:
    """Choose again after a module's prebuilt library was loaded, unless the choice was explicit."""
    if _chosen is None:
        select()


def _kernels():
    return _active if _active is not None else (select(), _active)[1]


def implementation() -> str:
    """Which host kernels run: "native (llvmlite JIT)", "native (prebuilt for <cpu>, from the module)" (with
    the calls that ran on numpy for want of a prebuilt kernel) or "numpy fallback" (named in run reports)."""
    if _kernels() is numpy_kernels:
        return numpy_kernels.LABEL
    prebuilt = jit.prebuilt_target()
    if jit.can_build() or prebuilt is None:
        return native.LABEL
    label = f"native (prebuilt for {prebuilt.cpu}, from the module)"
    if _fallbacks:
        label += (f"; numpy for {sum(_fallbacks.values())} calls without a prebuilt kernel "
                  f"({', '.join(sorted(_fallbacks))})")
    return label


@contextmanager
def recording() -> Iterator[list]:
    """Inside the block, every kernel call is noted as (name, args, kwargs), in order (aot.py replays them)."""
    global _recording
    saved, _recording = _recording, []
    try:
        yield _recording
    finally:
        _recording = saved


def replay(calls: list) -> None:
    """Run recorded calls on the native kernels (inside jit.building_for: plans and IR, no arithmetic)."""
    for name, args, kwargs in calls:
        getattr(native, name)(*args, **kwargs)


def _call(name: str, *args, **kwargs):
    kernels = _kernels()
    if _recording is not None:
        _recording.append((name, args, kwargs))
    try:
        return getattr(kernels, name)(*args, **kwargs)
    except KernelUnavailable:
        _fallbacks[name] = _fallbacks.get(name, 0) + 1
        return getattr(numpy_kernels, name)(*args, **kwargs)


def conv2d(x, w, bias=None, **options):
    """NCHW x (*) OIHW w, ONNX Conv semantics (see native / numpy_kernels `conv2d`)."""
    return _call("conv2d", x, w, bias, **options)


def dense(x, w, bias=None, **options):
    """x (N, K) @ w (O, K).T + bias; float32, or int8 with int32 / shifted-and-clipped int8 out."""
    return _call("dense", x, w, bias, **options)


def matmul(a, b):
    """float32 numpy/ONNX MatMul: 1-D operands promoted, leading batch dims broadcast."""
    return _call("matmul", a, b)


def add(a, b):
    """float32 a + b with numpy broadcasting."""
    return _call("add", a, b)


def sub(a, b):
    """float32 a - b with numpy broadcasting."""
    return _call("sub", a, b)


def mul(a, b):
    """float32 a * b with numpy broadcasting."""
    return _call("mul", a, b)


def relu(x):
    """max(x, 0) for float32, int8 or int32 (NaN stays NaN)."""
    return _call("relu", x)


def clip(x, lo, hi):
    """np.clip(x, lo, hi) for float32 or int8 (bounds must fit int8 for int8 x)."""
    return _call("clip", x, lo, hi)


def add_int8(a, b, **options):
    """clip((int32(a) + int32(b)) >> shift, lo, hi) as int8, broadcasting a and b."""
    return _call("add_int8", a, b, **options)


def quantize(x, exp):
    """float32 -> int8: clip(round_half_even(x * 2**exp), -128, 127)."""
    return _call("quantize", x, exp)


def dequantize(q, exp):
    """int8 or int32 -> float32 q * 2**-exp."""
    return _call("dequantize", q, exp)


def batch_norm(x, scale, bias, mean, var, eps=1e-5):
    """Inference batch norm on NCHW float32: (x - mean) * scale / sqrt(var + eps) + bias."""
    return _call("batch_norm", x, scale, bias, mean, var, eps)


def max_pool2d(x, **options):
    """ONNX MaxPool on NCHW float32 or int8; pads never win."""
    return _call("max_pool2d", x, **options)


def avg_pool2d(x, **options):
    """ONNX AveragePool on NCHW float32; int8 rounds the mean half up and clips to int8."""
    return _call("avg_pool2d", x, **options)


def global_avg_pool(x):
    """NCHW -> NC11 mean; int8 rounds half up."""
    return _call("global_avg_pool", x)


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along `axis` (ONNX Softmax-13), float32."""
    return _call("softmax", x, axis)


def transpose(x, perm):
    """np.transpose(x, perm) materialised contiguously (rank <= 6)."""
    return _call("transpose", x, perm)


def pad(x, pads, value=0):
    """ONNX Pad (constant mode): pads = [x1_begin, ..., x1_end, ...], all >= 0."""
    return _call("pad", x, pads, value)


def concat(xs, axis):
    """np.concatenate(xs, axis) for arrays of one dtype and rank."""
    return _call("concat", xs, axis)


def pack_activation(x, batch, block):
    """(N, C, H, W) -> (N/b, C/block, H, W, b, block), zero padded."""
    return _call("pack_activation", x, batch, block)


def unpack_activation(y, n, c):
    """(N/b, C/block, H, W, b, block) -> (N, C, H, W), dropping the padding."""
    return _call("unpack_activation", y, n, c)


__all__ = [
    "CHOICES", "CacheInfo", "KernelUnavailable", "add", "add_int8", "avg_pool2d", "batch_norm", "cache_info", "clear_cache", "clip",
    "concat", "conv2d", "dense", "dequantize", "global_avg_pool", "host_target", "implementation", "matmul", "max_pool2d",
    "mul", "native_available", "recording", "replay", "reselect", "pack_activation", "pad", "quantize", "relu", "select", "softmax", "sub", "transpose", "unpack_activation",
]
