"""The op registry (`registry.py`) and one module per op family that registers its ops.

Look ops up with `op_def(ir_name)` / `onnx_def(onnx_type)`; see `registry.OpDef`."""

from vtakit.compiler.ops.registry import (IMPORTS, ONNX_PRECISION, OPS, OpDef, Precision, accelerate, int8_rule, keeps_scale,
                                         onnx_def,
                                         op_def, precision_of, register)
from vtakit.compiler.ops import onnx_reference, window, linear, elementwise, layout, norm, quant, math, nn, recurrent, control, global_pool, gather_elements  # noqa: F401

__all__ = ["IMPORTS", "ONNX_PRECISION", "OPS", "OpDef", "Precision", "accelerate", "int8_rule", "keeps_scale", "onnx_def", "op_def", "precision_of",
           "register"]
