"""GPU backend: host operators as LLVM IR for nvptx64-nvidia-cuda (llvmlite), PTX, and a CUDA
driver-API runtime.

The public functions mirror `compiler.backends.cpu` (same names, arguments and results,
validated by the same checks) plus a keyword `gpu`.  Given numpy arrays they
run on the default CUDA device (or `gpu`) and return numpy arrays; given
`DeviceArray`s they run on those arrays' backend and return a `DeviceArray`,
so a graph's tensors stay on the device.  Backends: `CudaGpu` (the driver
API), `Emulator` (the same kernels compiled for the host CPU, for tests without
a GPU) and `Recorder` (compile time: lists launches, generates PTX).

    from vtakit.compiler import cuda
    ok, why = cuda.gpu_available()
    y = cuda.conv2d(x, w, b, pads=(1, 1, 1, 1))            # on the GPU
    y = cuda.conv2d(x, w, b, gpu=cuda.Emulator())          # the same kernel on the CPU
"""

from vtakit.compiler.backends.cuda.conv import conv2d
from vtakit.compiler.backends.cuda.linear import dense
from vtakit.compiler.backends.cuda.device_array import DeviceArray, GpuBackend
from vtakit.compiler.backends.cuda.elementwise import add, add_int8, batch_norm, clip, dequantize, dequantize_linear, mul, quantize, quantize_linear, relu, sub
from vtakit.compiler.backends.cuda.emulate import Emulator
from vtakit.compiler.backends.cuda.graph_kernels import OPERATORS, GpuKernels, record_launches
from vtakit.compiler.backends.cuda.gemm import matmul
from vtakit.compiler.backends.cuda.kernel import GpuKernel, Launch
from vtakit.compiler.backends.cuda.layout import concat, pack_activation, pad, transpose, unpack_activation
from vtakit.compiler.backends.cuda.pool import avg_pool2d, global_avg_pool, max_pool2d
from vtakit.compiler.backends.cuda.record import LaunchRecord, Recorder
from vtakit.compiler.backends.cuda.reduce import softmax
from vtakit.compiler.backends.cuda.driver_api import CudaGpu, default_gpu, gpu_available
from vtakit.compiler.backends.cuda.target import DEFAULT_ARCH, GpuTarget, assemble, find_ptxas

__all__ = [
    "DEFAULT_ARCH", "OPERATORS", "CudaGpu", "DeviceArray", "Emulator", "GpuBackend", "GpuKernel", "GpuKernels",
    "GpuTarget", "Launch", "LaunchRecord", "Recorder", "add", "add_int8", "assemble", "avg_pool2d", "batch_norm",
    "clip", "concat", "conv2d", "default_gpu", "dense", "dequantize", "dequantize_linear", "find_ptxas",
    "global_avg_pool", "gpu_available", "matmul", "max_pool2d", "mul", "pack_activation", "pad", "quantize",
    "quantize_linear", "record_launches", "relu", "softmax", "sub", "transpose", "unpack_activation",
]
