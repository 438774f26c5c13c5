"""CPU backend: the host kernels, native (LLVM IR JIT-compiled by llvmlite) or a numpy fallback.

Each public function validates its numpy arguments (raising `CompileError`
with op set to the kernel's name) and returns a fresh array; inputs are never
modified.  The native kernels (`native.py`: one kernel specialised on shapes,
dtype and parameters, compiled on first use, `cache_info()` counts them) run
where llvmlite is installed; without it (a board's runtime: there is no llvmlite
for 32-bit ARM) the numpy kernels of `numpy_kernels.py` run, under the same names.
VTAKIT_HOST_KERNELS=numpy (or `select("numpy")`) chooses the fallback where both
exist.  Integer paths are bit-exact in both; float32 paths differ from numpy
only by summation order.
"""

from __future__ import annotations

import os

from vtakit.compiler.backends.cpu import numpy_kernels
from vtakit.errors import ConfigError

try:
    from vtakit.compiler.backends.cpu import native
    from vtakit.compiler.backends.cpu.native import CacheInfo, cache_info, clear_cache, host_target  # noqa: F401
except ImportError as missing:  # only a missing llvmlite means "no native kernels here"
    if (missing.name or "").split(".")[0] != "llvmlite":
        raise
    native = None

CHOICES = ("native", "numpy")
_active = None  # the implementation in use: native or numpy_kernels (chosen on first use)


def select(choice: str | None = None) -> str:
    """Use the native kernels or the numpy ones ("native" / "numpy"; None: VTAKIT_HOST_KERNELS, else
    native where llvmlite is installed); returns the label of the implementation now in use."""
    global _active
    choice = choice if choice is not None else os.environ.get("VTAKIT_HOST_KERNELS") or None
    if choice is not None and choice not in CHOICES:
        raise ConfigError(f"VTAKIT_HOST_KERNELS must be one of {', '.join(CHOICES)}, got {choice[:40]!r}")
    if choice == "native" and native is None:
        raise ConfigError("native host kernels need llvmlite, which is not installed (unset "
                          "VTAKIT_HOST_KERNELS to run the numpy fallback)")
    _active = numpy_kernels if choice == "numpy" or native is None else native
    return _active.LABEL


def _kernels():
    return _active if _active is not None else (select(), _active)[1]


def implementation() -> str:
    """Which host kernels run: "native (llvmlite JIT)" or "numpy fallback" (named in run reports)."""
    return _kernels().LABEL


def conv2d(x, w, bias=None, **options):
    """NCHW x (*) OIHW w, ONNX Conv semantics (see native / numpy_kernels `conv2d`)."""
    return _kernels().conv2d(x, w, bias, **options)


def dense(x, w, bias=None, **options):
    """x (N, K) @ w (O, K).T + bias; float32, or int8 with int32 / shifted-and-clipped int8 out."""
    return _kernels().dense(x, w, bias, **options)


def matmul(a, b):
    """float32 numpy/ONNX MatMul: 1-D operands promoted, leading batch dims broadcast."""
    return _kernels().matmul(a, b)


def add(a, b):
    """float32 a + b with numpy broadcasting."""
    return _kernels().add(a, b)


def sub(a, b):
    """float32 a - b with numpy broadcasting."""
    return _kernels().sub(a, b)


def mul(a, b):
    """float32 a * b with numpy broadcasting."""
    return _kernels().mul(a, b)


def relu(x):
    """max(x, 0) for float32, int8 or int32 (NaN stays NaN)."""
    return _kernels().relu(x)


def clip(x, lo, hi):
    """np.clip(x, lo, hi) for float32 or int8 (bounds must fit int8 for int8 x)."""
    return _kernels().clip(x, lo, hi)


def add_int8(a, b, **options):
    """clip((int32(a) + int32(b)) >> shift, lo, hi) as int8, broadcasting a and b."""
    return _kernels().add_int8(a, b, **options)


def quantize(x, exp):
    """float32 -> int8: clip(round_half_even(x * 2**exp), -128, 127)."""
    return _kernels().quantize(x, exp)


def dequantize(q, exp):
    """int8 or int32 -> float32 q * 2**-exp."""
    return _kernels().dequantize(q, exp)


def batch_norm(x, scale, bias, mean, var, eps=1e-5):
    """Inference batch norm on NCHW float32: (x - mean) * scale / sqrt(var + eps) + bias."""
    return _kernels().batch_norm(x, scale, bias, mean, var, eps)


def max_pool2d(x, **options):
    """ONNX MaxPool on NCHW float32 or int8; pads never win."""
    return _kernels().max_pool2d(x, **options)


def avg_pool2d(x, **options):
    """ONNX AveragePool on NCHW float32; int8 rounds the mean half up and clips to int8."""
    return _kernels().avg_pool2d(x, **options)


def global_avg_pool(x):
    """NCHW -> NC11 mean; int8 rounds half up."""
    return _kernels().global_avg_pool(x)


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along `axis` (ONNX Softmax-13), float32."""
    return _kernels().softmax(x, axis)


def transpose(x, perm):
    """np.transpose(x, perm) materialised contiguously (rank <= 6)."""
    return _kernels().transpose(x, perm)


def pad(x, pads, value=0):
    """ONNX Pad (constant mode): pads = [x1_begin, ..., x1_end, ...], all >= 0."""
    return _kernels().pad(x, pads, value)


def concat(xs, axis):
    """np.concatenate(xs, axis) for arrays of one dtype and rank."""
    return _kernels().concat(xs, axis)


def pack_activation(x, batch, block):
    """(N, C, H, W) -> (N/b, C/block, H, W, b, block), zero padded."""
    return _kernels().pack_activation(x, batch, block)


def unpack_activation(y, n, c):
    """(N/b, C/block, H, W, b, block) -> (N, C, H, W), dropping the padding."""
    return _kernels().unpack_activation(y, n, c)


__all__ = [
    "CHOICES", "CacheInfo", "add", "add_int8", "avg_pool2d", "batch_norm", "cache_info", "clear_cache", "clip",
    "concat", "conv2d", "dense", "dequantize", "global_avg_pool", "host_target", "implementation", "matmul", "max_pool2d",
    "mul", "pack_activation", "pad", "quantize", "relu", "select", "softmax", "sub", "transpose", "unpack_activation",
]
