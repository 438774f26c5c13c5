"""The native host kernels: LLVM IR generated per shape, JIT-compiled by llvmlite and cached in-process.

`cpu/__init__.py` imports this module when llvmlite (>= 0.45) is installed and otherwise runs the numpy
fallback (`numpy_kernels.py`), which has the same names."""

import llvmlite

if tuple(int(part) for part in llvmlite.__version__.split(".")[:2]) < (0, 45):  # the emitted IR needs 0.45
    raise ImportError(f"llvmlite {llvmlite.__version__} is older than 0.45, which the kernels need", name="llvmlite")

from vtakit.compiler.backends.cpu.conv import conv2d  # noqa: E402
from vtakit.compiler.backends.cpu.linear import dense  # noqa: E402
from vtakit.compiler.backends.cpu.elementwise import add, add_int8, batch_norm, clip, dequantize, mul, quantize, relu, sub  # noqa: E402
from vtakit.compiler.backends.cpu.gemm import matmul  # noqa: E402
from vtakit.compiler.backends.cpu.jit import CacheInfo, cache_info, clear_cache, host_target  # noqa: E402
from vtakit.compiler.backends.cpu.layout import concat, pack_activation, pad, transpose, unpack_activation  # noqa: E402
from vtakit.compiler.backends.cpu.pool import avg_pool2d, global_avg_pool, max_pool2d  # noqa: E402
from vtakit.compiler.backends.cpu.softmax_kernel import softmax  # noqa: E402

LABEL = "native (llvmlite JIT)"

__all__ = [
    "CacheInfo", "LABEL", "add", "add_int8", "avg_pool2d", "batch_norm", "cache_info", "clear_cache", "clip",
    "concat", "conv2d", "dense", "dequantize", "global_avg_pool", "host_target", "matmul", "max_pool2d", "mul",
    "pack_activation", "pad", "quantize", "relu", "softmax", "sub", "transpose", "unpack_activation",
]
