"""CPU backend: host kernels generated as LLVM IR, JIT-compiled and cached in-process.

Each public function validates its numpy arguments (raising `CompileError`
with op set to the kernel's name), looks up or compiles a kernel specialised on
shapes, dtype and parameters (`cache_info()` counts them), and returns a fresh
array; inputs are never modified.  Integer paths are bit-exact; float32 paths
differ from numpy only by summation order.
"""

from vtakit.compiler.backends.cpu.conv import conv2d
from vtakit.compiler.backends.cpu.linear import dense
from vtakit.compiler.backends.cpu.elementwise import add, add_int8, batch_norm, clip, dequantize, mul, quantize, relu, sub
from vtakit.compiler.backends.cpu.gemm import matmul
from vtakit.compiler.backends.cpu.jit import CacheInfo, cache_info, clear_cache, host_target
from vtakit.compiler.backends.cpu.layout import concat, pack_activation, pad, transpose, unpack_activation
from vtakit.compiler.backends.cpu.pool import avg_pool2d, global_avg_pool, max_pool2d
from vtakit.compiler.backends.cpu.softmax_kernel import softmax

__all__ = [
    "CacheInfo", "add", "add_int8", "avg_pool2d", "batch_norm", "cache_info", "clear_cache", "clip", "concat",
    "conv2d", "dense", "dequantize", "global_avg_pool", "host_target", "matmul", "max_pool2d", "mul",
    "pack_activation", "pad", "quantize", "relu", "softmax", "sub", "transpose", "unpack_activation",
]
