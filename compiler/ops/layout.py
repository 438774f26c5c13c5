"""Layout ops, all precision-neutral: Identity (and inference Dropout), Flatten, Reshape (and
Squeeze/Unsqueeze, the reshapes they are), Transpose, Concat, Pad (constant)."""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.registry import contiguous, OpDef, Precision, fail, register, same, text
from vtakit.compiler.backends.host.layout import LAYOUT_DTYPES


def _convert_identity(imp, n, name: str, at: dict) -> None:
    op, outs = n.op_type, list(n.output)
    if op == "Dropout":
        if len(outs) > 1 and outs[1]:  # inference keeps every value: the mask is all true
            read = any(outs[1] in m.input for m in imp.model.graph.node) or \
                outs[1] in {o.name for o in imp.model.graph.output}
            if read:
                imp.set_const(outs[1], np.ones(imp.graph.tensors[n.input[0]].shape, bool))
        training = imp.const_input(n, name, 2, "Dropout training_mode")
        if training is not None and bool(training):
            raise CompileError("training-mode Dropout is not supported", node=name, op=op)
    imp.emit("Identity", name, list(n.input)[:1], outs[:1], {})


def _convert_flatten(imp, n, name: str, at: dict) -> None:
    x = imp.graph.tensors[n.input[0]]
    axis = int(at.get("axis", 1))
    imp.emit("Flatten", name, list(n.input)[:1], list(n.output)[:1], dict(axis=axis + len(x.shape) if axis < 0
                                                                           else axis))


def _infer_flatten(node: Node, g: Graph) -> list[TensorInfo]:
    x, axis = g.tensors[node.inputs[0]], node.attrs["axis"]
    return [TensorInfo((int(np.prod(x.shape[:axis], dtype=np.int64)),
                        int(np.prod(x.shape[axis:], dtype=np.int64))), x.dtype)]


def reshape_target(shape: tuple[int, ...], target: list[int], allowzero: bool) -> tuple[int, ...]:
    out = [shape[i] if (t == 0 and not allowzero and i < len(shape)) else t for i, t in enumerate(target)]
    if out.count(-1) > 1:
        raise ValueError(f"Reshape target {target} has more than one -1")
    if -1 in out:
        known = int(np.prod([t for t in out if t != -1], dtype=np.int64))
        total = int(np.prod(shape, dtype=np.int64))
        if known == 0 or total % known:
            raise ValueError(f"cannot reshape {shape} into {target}")
        out[out.index(-1)] = total // known
    return tuple(int(t) for t in out)


def squeeze_target(imp, n, name: str, op: str, x: TensorInfo, at: dict) -> tuple[int, ...]:
    """Squeeze/Unsqueeze as the Reshape they are (axes moved from an attribute to an input in opset 13)."""
    axes = at.get("axes") if imp.opset < 13 else imp.const_input(n, name, 1, f"{op} axes")
    if op == "Squeeze":
        rank = len(x.shape)
        drop = {int(a) % rank for a in axes} if axes is not None else {d for d, s in enumerate(x.shape) if s == 1}
        if any(x.shape[d] != 1 for d in drop):
            raise CompileError(f"cannot squeeze axes {sorted(drop)} of shape {x.shape}", node=name, op=op)
        return tuple(s for d, s in enumerate(x.shape) if d not in drop)
    if axes is None:
        raise CompileError("Unsqueeze needs axes", node=name, op=op)
    rank = len(x.shape) + len(axes)
    new = sorted(int(a) % rank for a in axes)
    if len(set(new)) != len(new):
        raise CompileError(f"repeated Unsqueeze axes {list(axes)}", node=name, op=op)
    rest = iter(x.shape)
    return tuple(1 if d in new else next(rest) for d in range(rank))


def _convert_reshape(imp, n, name: str, at: dict) -> None:
    x = imp.graph.tensors[n.input[0]]
    if n.op_type == "Reshape":
        target = [int(s) for s in imp.const_input(n, name, 1, "Reshape shape")]
        shape = reshape_target(x.shape, target, bool(at.get("allowzero", 0)))
    else:
        shape = squeeze_target(imp, n, name, n.op_type, x, at)
    imp.emit("Reshape", name, list(n.input)[:1], list(n.output)[:1], dict(shape=shape))


def _infer_reshape(node: Node, g: Graph) -> list[TensorInfo]:
    x, shape = g.tensors[node.inputs[0]], tuple(node.attrs["shape"])
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise fail(node, f"cannot reshape {x.shape} into {shape}")
    return [TensorInfo(shape, x.dtype)]


def _convert_transpose(imp, n, name: str, at: dict) -> None:
    x = imp.graph.tensors[n.input[0]]
    perm = [int(p) for p in at.get("perm", range(len(x.shape) - 1, -1, -1))]
    imp.emit("Transpose", name, list(n.input)[:1], list(n.output)[:1], dict(perm=perm))


def _infer_transpose(node: Node, g: Graph) -> list[TensorInfo]:
    x, perm = g.tensors[node.inputs[0]], node.attrs["perm"]
    if sorted(perm) != list(range(len(x.shape))):
        raise fail(node, f"perm {perm} is not a permutation of {len(x.shape)} axes")
    return [TensorInfo(tuple(x.shape[p] for p in perm), x.dtype)]


def _convert_concat(imp, n, name: str, at: dict) -> None:
    x = imp.graph.tensors[n.input[0]]
    axis = int(at["axis"])
    imp.emit("Concat", name, list(n.input), list(n.output)[:1], dict(axis=axis + len(x.shape) if axis < 0 else axis))


def _infer_concat(node: Node, g: Graph) -> list[TensorInfo]:
    ins = [g.tensors[i] for i in node.inputs]
    axis, shape = node.attrs["axis"], list(ins[0].shape)
    for t in ins[1:]:
        if len(t.shape) != len(shape) or any(s != u for d, (s, u) in enumerate(zip(shape, t.shape)) if d != axis):
            raise fail(node, f"cannot concatenate {ins[0].shape} and {t.shape} along axis {axis}")
        shape[axis] += t.shape[axis]
    return [TensorInfo(tuple(shape), ins[0].dtype)]


def _run_concat(node: Node, args: list, k) -> object:
    if all(isinstance(a, np.ndarray) for a in args) and (any(a.size == 0 for a in args) or args[0].dtype not in (
            np.float32, np.int8)):
        return contiguous(np.concatenate(args, axis=node.attrs["axis"]))
    return k.concat(list(args), node.attrs["axis"])


def _convert_pad(imp, n, name: str, at: dict) -> None:
    op = "Pad"
    mode = text(at.get("mode"), "constant")
    if imp.opset < 11:  # pads and value were attributes
        pads, value = [int(p) for p in at["pads"]], float(at.get("value", 0.0))
    else:
        pads = [int(p) for p in imp.const_input(n, name, 1, "Pad pads")]
        v = imp.const_input(n, name, 2, "Pad constant_value")
        value = float(v) if v is not None else 0.0
        if len(n.input) > 3 and n.input[3]:
            rank = len(imp.graph.tensors[n.input[0]].shape)
            axes = [int(a) % rank for a in imp.const_input(n, name, 3, "Pad axes")]
            full = [0] * (2 * rank)
            for i, ax in enumerate(axes):
                full[ax], full[ax + rank] = pads[i], pads[i + len(axes)]
            pads = full
    if mode != "constant":
        if mode not in ("reflect", "edge", "wrap"):
            raise CompileError(f"Pad mode {mode!r} is not supported (constant, reflect, edge, wrap)", node=name, op=op)
        imp.emit("PadMode", name, list(n.input)[:1], list(n.output)[:1], dict(pads=pads, mode=mode))
        return
    if min(pads) < 0:
        raise CompileError(f"negative pads {pads} are not supported", node=name, op=op)
    imp.emit(op, name, list(n.input)[:1], list(n.output)[:1], dict(pads=pads, value=value))


def _infer_pad(node: Node, g: Graph) -> list[TensorInfo]:
    x, pads = g.tensors[node.inputs[0]], node.attrs["pads"]
    r = len(x.shape)
    if len(pads) != 2 * r:
        raise fail(node, f"{len(pads)} pads for a rank-{r} tensor")
    shape = tuple(s + pads[d] + pads[d + r] for d, s in enumerate(x.shape))
    if min(shape) < 0:
        raise fail(node, f"pads {pads} remove more than the shape {x.shape} has")
    return [TensorInfo(shape, x.dtype)]


def _run_pad_mode(node: Node, args: list, k) -> np.ndarray:
    x, pads, mode = np.asarray(args[0]), node.attrs["pads"], node.attrs["mode"]
    r = x.ndim
    crop = tuple(slice(max(-pads[d], 0), x.shape[d] - max(-pads[d + r], 0)) for d in range(r))
    x = x[crop]
    widths = [(max(pads[d], 0), max(pads[d + r], 0)) for d in range(r)]
    return contiguous(np.pad(x, widths, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[mode]))


register(OpDef("Identity", same, lambda n, a, k: a[0], Precision.NEUTRAL, ("Identity", "Dropout"), _convert_identity,
               (1, 7, 10, 12, 13)))
register(OpDef("Flatten", _infer_flatten,
               lambda n, a, k: a[0].reshape(int(np.prod(a[0].shape[:n.attrs["axis"]], dtype=np.int64)), -1),
               Precision.NEUTRAL, ("Flatten",), _convert_flatten, (1, 9, 11, 13, 21)))
register(OpDef("Reshape", _infer_reshape, lambda n, a, k: a[0].reshape(n.attrs["shape"]), Precision.NEUTRAL,
               ("Reshape", "Squeeze", "Unsqueeze"), _convert_reshape, (1, 5, 11, 13, 14, 19, 21)))
register(OpDef("Transpose", _infer_transpose, lambda n, a, k: k.transpose(a[0], tuple(n.attrs["perm"])),
               Precision.NEUTRAL, ("Transpose",), _convert_transpose, (1, 13, 21),
               dtypes=tuple(d.name for d in LAYOUT_DTYPES)))
register(OpDef("Concat", _infer_concat, _run_concat, Precision.NEUTRAL,
               ("Concat",), _convert_concat, (1, 4, 11, 13)))
register(OpDef("Pad", _infer_pad, lambda n, a, k: k.pad(a[0], n.attrs["pads"], n.attrs["value"]), Precision.NEUTRAL,
               ("Pad",), _convert_pad, (1, 2, 11, 13, 18, 19, 21),
               int8_form=lambda g, n: not g.is_const(n.inputs[0])))
register(OpDef("PadMode", _infer_pad, _run_pad_mode, Precision.FLOAT, kernel="numpy",
               doc="reflect/edge/wrap padding"))
