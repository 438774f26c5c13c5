"""The native host kernels: LLVM IR generated per shape and compiled by llvmlite (kept on disk per CPU), or
loaded from a module's prebuilt library where llvmlite is missing (jit.py says where each comes from).

`cpu/__init__.py` runs these where either is possible and otherwise the numpy fallback (`numpy_kernels.py`),
which has the same names."""

from vtakit.compiler.backends.cpu.conv import conv2d
from vtakit.compiler.backends.cpu.linear import dense
from vtakit.compiler.backends.cpu.elementwise import add, add_int8, batch_norm, clip, dequantize, mul, quantize, relu, sub
from vtakit.compiler.backends.cpu.gemm import matmul
from vtakit.compiler.backends.cpu.jit import CacheInfo, cache_info, clear_cache, host_target
from vtakit.compiler.backends.cpu.layout import concat, pack_activation, pad, transpose, unpack_activation
from vtakit.compiler.backends.cpu.pool import avg_pool2d, global_avg_pool, max_pool2d
from vtakit.compiler.backends.cpu.softmax_kernel import softmax

LABEL = "native (llvmlite JIT)"

__all__ = [
    "CacheInfo", "LABEL", "add", "add_int8", "avg_pool2d", "batch_norm", "cache_info", "clear_cache", "clip",
    "concat", "conv2d", "dense", "dequantize", "global_avg_pool", "host_target", "matmul", "max_pool2d", "mul",
    "pack_activation", "pad", "quantize", "relu", "softmax", "sub", "transpose", "unpack_activation",
]
