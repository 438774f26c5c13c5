"""Normalisations with llvmlite kernels: BatchNormalization (inference), Softmax.

Batch norm folds into the conv before it (fold.fold_into_conv) when its
statistics are constants; fed as graph inputs it runs as its own host node.  Training mode (batch
statistics, running-statistics outputs) runs through onnx.reference."""

from __future__ import annotations

from vtakit.errors import CompileError
from vtakit.compiler.ir import Node
from vtakit.compiler.ops.onnx_reference import convert_generic
from vtakit.compiler.ops.registry import FLOAT32, OpDef, Precision, register, same


def _convert_bn(imp, n, name: str, at: dict) -> None:
    op, outs = n.op_type, list(n.output)
    if at.get("training_mode", 0) or len([o for o in outs if o]) > 1:
        # batch statistics and the running-statistics outputs: generically, one IR node per output read
        convert_generic(imp, n, name, at)
        return
    x = imp.graph.tensors[n.input[0]]
    for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
        t = imp.graph.tensors.get(n.input[i])
        if t is None or (len(t.shape) != 1 or (len(x.shape) > 1 and t.shape[0] != x.shape[1])):
            if not at.get("spatial", 1) and t is not None:
                raise CompileError("BatchNormalization spatial=0 is not supported", node=name, op=op)
            raise CompileError(f"BatchNormalization {what} must be a vector with one value per channel",
                               node=name, op=op)
    imp.emit(op, name, list(n.input)[:5], outs[:1], dict(epsilon=float(at.get("epsilon", 1e-5))))


def _run_bn(node: Node, args: list, k) -> object:
    return k.batch_norm(args[0], *args[1:5], node.attrs["epsilon"])


def _convert_softmax(imp, n, name: str, at: dict) -> None:
    x = imp.graph.tensors[n.input[0]]
    axis = int(at.get("axis", -1 if imp.opset >= 13 else 1))
    axis = axis + len(x.shape) if axis < 0 else axis
    legacy = imp.opset < 13 and axis != len(x.shape) - 1  # before 13: softmax over the flattened tail
    imp.emit("Softmax", name, list(n.input)[:1], list(n.output)[:1], dict(axis=axis, legacy=legacy))


def _run_softmax(node: Node, args: list, k) -> object:
    x, a = args[0], node.attrs
    if not a.get("legacy"):
        return k.softmax(x, axis=a["axis"])
    rows = 1
    for s in x.shape[:a["axis"]]:
        rows *= int(s)
    return k.softmax(x.reshape(rows, -1), axis=-1).reshape(x.shape)


register(OpDef("BatchNormalization", same, _run_bn, Precision.FLOAT, ("BatchNormalization",), _convert_bn,
               (1, 6, 7, 9, 14, 15), dtypes=FLOAT32))
register(OpDef("Softmax", same, _run_softmax, Precision.FLOAT, ("Softmax",), _convert_softmax, (1, 11, 13),
               dtypes=FLOAT32))
