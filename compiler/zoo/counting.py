"""Multiply-accumulate counts of an ONNX model, from inferred shapes.

Only Conv, Gemm and MatMul count: they are what the accelerator's GEMM core
executes; bias adds, pooling and element-wise ops are bandwidth, not MACs.
"""

from __future__ import annotations

import math

import onnx
from onnx import helper, shape_inference
from vtakit.errors import ZooError


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Every tensor's shape; a symbolic or unknown dimension counts as 1 (per-sample MACs)."""
    inferred = shape_inference.infer_shapes(model)
    graph = inferred.graph
    shapes: dict[str, list[int]] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = info.type.tensor_type
        if tensor_type.HasField("shape"):
            shapes[info.name] = [d.dim_value if d.HasField("dim_value") else 1
                                 for d in tensor_type.shape.dim]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _shape(shapes: dict[str, list[int]], name: str, node: onnx.NodeProto) -> list[int]:
    if name not in shapes:
        raise ZooError(f"no inferred shape for {name!r} (input of {node.op_type} {node.name!r})")
    return shapes[name]


def macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of one inference (symbolic batch dimensions taken as 1)."""
    shapes = _static_shapes(model)
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            weight = _shape(shapes, node.input[1], node)
            out = _shape(shapes, node.output[0], node)
            total += math.prod(out) * math.prod(weight[1:])      # (C_in / group) * kh * kw each
        elif node.op_type == "Gemm":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            a = _shape(shapes, node.input[0], node)
            k = a[0] if attrs.get("transA", 0) else a[1]
            total += math.prod(_shape(shapes, node.output[0], node)) * k
        elif node.op_type == "MatMul":
            a = _shape(shapes, node.input[0], node)
            total += math.prod(_shape(shapes, node.output[0], node)) * a[-1]
    return total
