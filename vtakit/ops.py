"""User-facing operators (`vtakit.ops.conv2d`, `dense`, `add`, ...): see vtakit.compiler.vta.ops."""

from vtakit.compiler.vta.ops import (  # noqa: F401
    OpReport, add, compile_conv2d, conv2d, dense, depthwise_conv2d, matmul, max_pool2d, relu, requantize,
)
