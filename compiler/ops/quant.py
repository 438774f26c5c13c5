"""Quantization ops: ONNX's QuantizeLinear/DequantizeLinear and QLinearConv/QLinearMatMul
(imported as DequantizeLinear -> float op -> QuantizeLinear, so the compiler re-quantizes
one float graph its own way), and the quantizer's power-of-two Quantize/Dequantize."""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends import cpu
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.registry import OpDef, Precision, register
from vtakit.compiler.ops.window import convert_conv

QDQ_WEIGHTS_NOTE = "qdq_weights"  # Graph.notes: weight tensor -> how the import dequantized it (quant/qdq.py reads it)


def record_weight(graph: Graph, out: str, q: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int,
                  node: str) -> None:
    """Called by the import for a DequantizeLinear of a constant (or a QLinear op's weights)."""
    graph.notes.setdefault(QDQ_WEIGHTS_NOTE, {})[out] = dict(
        node=node, dtype=np.asarray(q).dtype.name, scale=np.asarray(scale, np.float32).reshape(-1),
        zero_point=np.asarray(zp).reshape(-1), axis=axis % max(np.ndim(q), 1), ndim=int(np.ndim(q)))


def quantize_linear(x: np.ndarray, a: dict) -> np.ndarray:
    info = np.iinfo(a["dtype"])
    q = np.rint(x / np.float32(a["scale"])) + a["zero_point"]
    return np.clip(q, info.min, info.max).astype(a["dtype"])


def dequantize_linear(x: np.ndarray, a: dict) -> np.ndarray:
    return ((x.astype(np.int32) - a["zero_point"]).astype(np.float32) * np.float32(a["scale"])).astype(np.float32)


def _scale_zp(imp, n, name: str, idx: int) -> tuple[np.ndarray, np.ndarray]:
    scale = imp.const_input(n, name, idx, "quantization scale")
    zp = imp.const_input(n, name, idx + 1, "zero point")
    zp = np.zeros((), np.uint8) if zp is None else zp
    return np.asarray(scale, np.float32), zp


def _convert_qdq(imp, n, name: str, at: dict) -> None:
    op = n.op_type
    scale, zp = _scale_zp(imp, n, name, 1)
    if scale.size != 1:
        raise CompileError("per-axis quantization of activations is not supported", node=name, op=op)
    attrs = dict(scale=float(scale.reshape(-1)[0]), zero_point=int(zp.reshape(-1)[0]), dtype=zp.dtype.name)
    if op == "QuantizeLinear" and attrs["dtype"] not in ("int8", "uint8"):
        raise CompileError(f"quantizing to {attrs['dtype']} is not supported", node=name, op=op)
    imp.emit(op, name, list(n.input)[:1], list(n.output)[:1], attrs)


def _dequant_const(q: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int) -> np.ndarray:
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[axis] = scale.size
    return ((q.astype(np.float32) - zp.astype(np.float32).reshape(shape if zp.size > 1 else ()))
            * scale.reshape(shape if scale.size > 1 else ())).astype(np.float32)


def fold_dequantize(imp, n, name: str) -> bool:
    """A DequantizeLinear of constants (a QDQ model's weights and biases) folds at import in numpy,
    per axis too, and records its scales for `qdq` (False: blocked quantization, left to onnx)."""
    at = {a.name: a for a in n.attribute}
    if ("block_size" in at and at["block_size"].i) or "output_dtype" in at:
        return False
    ins = list(n.input)
    q = imp.graph.consts[ins[0]]
    scale = imp.graph.consts[ins[1]]
    zp = imp.graph.consts[ins[2]] if len(ins) > 2 and ins[2] else np.zeros((), q.dtype)
    if q.dtype.kind not in "iu" or q.dtype.itemsize > 4 or scale.dtype != np.float32:  # others: onnx.reference
        return False
    axis = at["axis"].i if "axis" in at else 1
    axis = axis % max(q.ndim, 1)
    if scale.size > 1 and (q.ndim == 0 or scale.size != q.shape[axis]):
        raise CompileError(f"{scale.size} scales for axis {axis} of a {q.shape} tensor", node=name, op=n.op_type)
    imp.set_const(n.output[0], _dequant_const(q, scale, np.asarray(zp), axis))
    record_weight(imp.graph, n.output[0], q, scale, np.asarray(zp), axis, name)
    return True


def _convert_qlinear(imp, n, name: str, at: dict) -> None:
    """QLinearConv / QLinearMatMul -> DequantizeLinear, float op, QuantizeLinear."""
    g, ins = imp.graph, list(n.input)
    kind = "Conv" if n.op_type == "QLinearConv" else "MatMul"
    xs, xzp = _scale_zp(imp, n, name, 1)
    ws, wzp = _scale_zp(imp, n, name, 4)
    ys, yzp = _scale_zp(imp, n, name, 6)
    if xs.size != 1 or ys.size != 1:
        raise CompileError("per-axis activation scales are not supported", node=name, op=n.op_type)
    xf = g.fresh_name(f"{name}.x_float")
    imp.emit("DequantizeLinear", f"{name}.dequantize", [ins[0]], [xf],
             dict(scale=float(xs.reshape(-1)[0]), zero_point=int(xzp.reshape(-1)[0]), dtype=xzp.dtype.name))
    w = imp.const_input(n, name, 3, "weights")
    axis = 0 if kind == "Conv" else 1
    wf = g.add_const(f"{name}.weight", _dequant_const(w, ws, wzp, axis))
    record_weight(g, wf, w, ws, wzp, axis, name)
    yf = g.fresh_name(f"{name}.y_float")
    if kind == "Conv":
        bias = imp.const_input(n, name, 8, "bias")
        inputs = [xf, wf]
        if bias is not None:
            inputs.append(g.add_const(f"{name}.bias", (bias.astype(np.float64) * xs.reshape(-1)[0]
                                                       * ws.reshape(-1)).astype(np.float32)))
        convert_conv(imp, n, f"{name}.conv", at, inputs, [yf])
    else:
        imp.emit("MatMul", f"{name}.matmul", [xf, wf], [yf], {})
    imp.emit("QuantizeLinear", name, [yf], [n.output[0]],
             dict(scale=float(ys.reshape(-1)[0]), zero_point=int(yzp.reshape(-1)[0]), dtype=yzp.dtype.name))


def _infer_q(node: Node, g: Graph) -> list[TensorInfo]:
    return [TensorInfo(g.tensors[node.inputs[0]].shape, node.attrs["dtype"])]


def _infer_dq(node: Node, g: Graph) -> list[TensorInfo]:
    return [TensorInfo(g.tensors[node.inputs[0]].shape, "float32")]


def _infer_q8(node: Node, g: Graph) -> list[TensorInfo]:
    return [TensorInfo(g.tensors[node.inputs[0]].shape, "int8", node.attrs["exp"])]


def _unreachable(node: Node, args: list, k) -> None:
    raise CompileError("imports as other ops and is never run", node=node.name, op=node.op)


register(OpDef("QuantizeLinear", _infer_q,
               lambda n, a, k: quantize_linear(a[0], n.attrs) if k is cpu
               else k.quantize_linear(a[0], n.attrs["scale"], n.attrs["zero_point"], n.attrs["dtype"]),
               Precision.FLOAT, ("QuantizeLinear",), _convert_qdq, (10, 13, 19, 21)))
register(OpDef("DequantizeLinear", _infer_dq,
               lambda n, a, k: dequantize_linear(a[0], n.attrs) if k is cpu
               else k.dequantize_linear(a[0], n.attrs["scale"], n.attrs["zero_point"]),
               Precision.FLOAT, ("DequantizeLinear",), _convert_qdq, (10, 13, 19, 21)))
register(OpDef("QLinear", _infer_dq, _unreachable, None, ("QLinearConv", "QLinearMatMul"), _convert_qlinear,
               (10, 21), doc="imports as DequantizeLinear -> Conv/MatMul -> QuantizeLinear"),
         {"QLinearConv": Precision.INT8, "QLinearMatMul": Precision.INT8})  # their float op, re-quantized
register(OpDef("Quantize", _infer_q8, lambda n, a, k: k.quantize(a[0], n.attrs["exp"]), None))


def _run_dequantize(node: Node, args: list, k) -> object:
    """q * 2**-exp; an int32 accumulator with per-channel weight exponents (quantize.wide_output) then
    times its channels' power-of-two factors, the node's second input."""
    y = k.dequantize(args[0], node.attrs["exp"])
    return k.mul(y, args[1]) if len(args) > 1 and args[1] is not None else y


register(OpDef("Dequantize", _infer_dq, _run_dequantize, None))
