"""User-facing operators (`vtakit.ops.conv2d`, `dense`, `add`, ...): see vtakit.compiler.backends.vta.ops."""

from vtakit.compiler.backends.vta.ops import OpReport, add, compile_conv2d, conv2d, dense, depthwise_conv2d, matmul, max_pool2d, relu, requantize
