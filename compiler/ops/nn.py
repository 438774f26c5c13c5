"""Network ops without llvmlite kernels yet: LRN, InstanceNormalization, LayerNormalization,
ConvTranspose, Resize/Upsample (nearest and linear in numpy; other modes through onnx.reference)
and the generic ones this compiler chooses to take explicitly (reductions, ArgMax, TopK, Split,
Slice, Gather, Tile, Expand, DepthToSpace/SpaceToDepth, ...; Einsum is linear.py's)."""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.onnx_reference import convert_generic, generic_def
from vtakit.compiler.ops.registry import auto_pad, contiguous, OpDef, Precision, fail, register, same, text
from vtakit.compiler.ops.window import pair


# -------------------------------------------------------------------------------------------- LRN
def _convert_lrn(imp, n, name: str, at: dict) -> None:
    if "size" not in at or int(at["size"]) < 1:
        raise CompileError("LRN needs a positive size", node=name, op="LRN")
    if len(imp.graph.tensors[n.input[0]].shape) < 3:
        raise CompileError("LRN needs an input of rank >= 3 (N, C, ...)", node=name, op="LRN")
    imp.emit("LRN", name, [n.input[0]], [n.output[0]], dict(
        size=int(at["size"]), alpha=float(at.get("alpha", 1e-4)), beta=float(at.get("beta", 0.75)),
        bias=float(at.get("bias", 1.0))))


def _run_lrn(node: Node, args: list, k) -> np.ndarray:
    x, a = np.asarray(args[0], np.float32), node.attrs
    c, size = x.shape[1], a["size"]
    sq = np.square(x, dtype=np.float64)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    csum = np.cumsum(padded, axis=1)
    csum = np.concatenate([np.zeros_like(csum[:, :1]), csum], axis=1)
    window = csum[:, size:size + c] - csum[:, :c]
    return contiguous((x / (a["bias"] + a["alpha"] / size * window) ** a["beta"]).astype(np.float32))


# --------------------------------------------------------------------------- Instance / LayerNorm
def _convert_instnorm(imp, n, name: str, at: dict) -> None:
    imp.emit("InstanceNormalization", name, list(n.input)[:3], [n.output[0]],
             dict(epsilon=float(at.get("epsilon", 1e-5))))


def _run_instnorm(node: Node, args: list, k) -> np.ndarray:
    x, s, b = (np.asarray(v, np.float32) for v in args[:3])
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = np.square(x - mean).mean(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean) / np.sqrt(var + node.attrs["epsilon"]) * s.reshape(shape) + b.reshape(shape)
    return contiguous(y.astype(np.float32))


def _convert_layernorm(imp, n, name: str, at: dict) -> None:
    if len([o for o in n.output if o]) > 1 or at.get("stash_type", 1) != 1:  # mean / inv-std outputs
        convert_generic(imp, n, name, at)
        return
    rank = len(imp.graph.tensors[n.input[0]].shape)
    axis = int(at.get("axis", -1))
    imp.emit("LayerNormalization", name, list(n.input)[:3], [n.output[0]],
             dict(axis=axis % rank, epsilon=float(at.get("epsilon", 1e-5))))


def _run_layernorm(node: Node, args: list, k) -> np.ndarray:
    x = np.asarray(args[0], np.float32)
    axes = tuple(range(node.attrs["axis"], x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = np.square(x - mean).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + node.attrs["epsilon"]) * args[1]
    if len(args) > 2 and args[2] is not None:
        y = y + args[2]
    return contiguous(y.astype(np.float32))


# ---------------------------------------------------------------------------------- ConvTranspose
def _convert_convtranspose(imp, n, name: str, at: dict) -> None:
    op = "ConvTranspose"
    x, w = imp.graph.tensors[n.input[0]], imp.graph.tensors[n.input[1]]
    if len(x.shape) != 4 or len(w.shape) != 4 or "output_shape" in at:  # 1-D, 3-D, pads from output_shape
        convert_generic(imp, n, name, at)
        return
    kernel = tuple(int(k) for k in at.get("kernel_shape", w.shape[2:]))
    strides, dil = pair(at.get("strides"), (1, 1)), pair(at.get("dilations"), (1, 1))
    outpad = pair(at.get("output_padding"), (0, 0))
    group = int(at.get("group", 1))
    auto = auto_pad(at)
    pads = tuple(int(p) for p in at.get("pads", (0, 0, 0, 0)))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(strides[i] * (x.shape[2 + i] - 1) + outpad[i] + ((kernel[i] - 1) * dil[i] + 1)
                     - x.shape[2 + i] * strides[i], 0) for i in range(2)]
        lo = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        pads = (lo[0], lo[1], total[0] - lo[0], total[1] - lo[1])
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    imp.emit(op, name, list(n.input)[:3], [n.output[0]],
             dict(kernel=kernel, strides=strides, dilations=dil, pads=pads, output_padding=outpad, group=group))


def _infer_convtranspose(node: Node, g: Graph) -> list[TensorInfo]:
    x, w, a = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]], node.attrs
    if x.shape[1] != w.shape[0] or w.shape[0] % a["group"]:
        raise fail(node, f"input has {x.shape[1]} channels, weight {w.shape} with {a['group']} groups")
    out = [a["strides"][i] * (x.shape[2 + i] - 1) + a["output_padding"][i] + (a["kernel"][i] - 1)
           * a["dilations"][i] + 1 - a["pads"][i] - a["pads"][i + 2] for i in range(2)]
    if min(out) < 1:
        raise fail(node, f"output size {out} is empty")
    return [TensorInfo((x.shape[0], w.shape[1] * a["group"], out[0], out[1]), "float32")]


def _run_convtranspose(node: Node, args: list, k) -> np.ndarray:
    """Scatter form: each kernel tap adds x @ W[:, :, i, j] at stride-spaced output positions."""
    x, w, a = np.asarray(args[0], np.float32), np.asarray(args[1], np.float32), node.attrs
    n_, c, h, wd = x.shape
    g, (sh, sw), (dh, dw) = a["group"], a["strides"], a["dilations"]
    kh, kw = a["kernel"]
    cg, og = c // g, w.shape[1]
    full_h = sh * (h - 1) + a["output_padding"][0] + (kh - 1) * dh + 1
    full_w = sw * (wd - 1) + a["output_padding"][1] + (kw - 1) * dw + 1
    out = np.zeros((n_, og * g, full_h, full_w), np.float32)
    for gi in range(g):
        xg = x[:, gi * cg:(gi + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                tap = np.einsum("nchw,co->nohw", xg, w[gi * cg:(gi + 1) * cg, :, i, j], optimize=True)
                out[:, gi * og:(gi + 1) * og, i * dh:i * dh + sh * (h - 1) + 1:sh,
                    j * dw:j * dw + sw * (wd - 1) + 1:sw] += tap
    t, l, b, r = a["pads"]
    out = out[:, :, t:full_h - b, l:full_w - r]
    if len(args) > 2 and args[2] is not None:
        out = out + np.asarray(args[2], np.float32).reshape(1, -1, 1, 1)
    return contiguous(out)


# --------------------------------------------------------------------------------- Resize/Upsample
_COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nearest")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _convert_resize(imp, n, name: str, at: dict) -> None:
    """Nearest and linear with the usual coordinate modes run in numpy; cubic, antialiasing, crops and
    aspect-ratio policies run through onnx.reference.  Unknown modes are one error."""
    op, g = n.op_type, imp.graph
    mode = text(at.get("mode"), "nearest")
    if mode not in ("nearest", "linear", "bilinear", "cubic"):
        raise CompileError(f"{op} mode {mode!r} is not supported (nearest, linear, cubic)", node=name, op=op)
    x = g.tensors[n.input[0]]
    if op == "Upsample" or imp.opset < 11:
        scales = at.get("scales") if (op == "Upsample" and imp.opset < 9) else imp.const_input(n, name, 1, "scales")
        coord, nearest = "asymmetric", "floor"
        sizes = None
        if text(at.get("coordinate_transformation_mode"), "") or scales is None:
            raise CompileError(f"{op} needs constant scales", node=name, op=op)
    else:
        coord = text(at.get("coordinate_transformation_mode"), "half_pixel")
        nearest = text(at.get("nearest_mode"), "round_prefer_floor")
        scales = imp.const_input(n, name, 2, "scales")
        sizes = imp.const_input(n, name, 3, "sizes")
        if scales is not None and np.asarray(scales).size == 0:
            scales = None
        if coord not in _COORDS + ("half_pixel_symmetric", "tf_crop_and_resize"):
            raise CompileError(f"Resize coordinate_transformation_mode {coord!r} is not supported", node=name, op=op)
        if nearest not in _NEAREST:
            raise CompileError(f"Resize nearest_mode {nearest!r} is not supported", node=name, op=op)
        if scales is None and sizes is None:
            raise CompileError("Resize needs constant scales or sizes", node=name, op=op)
        generic = (mode == "cubic" or coord not in _COORDS or at.get("antialias", 0) or "axes" in at
                   or text(at.get("keep_aspect_ratio_policy"), "stretch") != "stretch")
        if generic:
            convert_generic(imp, n, name, at)
            return
    mode = "linear" if mode == "bilinear" else mode
    if mode == "cubic":
        raise CompileError("Upsample mode 'cubic' is not supported (nearest, linear)", node=name, op=op)
    scales = [float(s) for s in scales] if scales is not None else [t / s for t, s in zip(sizes, x.shape)]
    if len(scales) != len(x.shape) or min(scales) <= 0:
        raise CompileError(f"{op} scales {scales} do not fit the input shape {x.shape}", node=name, op=op)
    out = [int(s) for s in sizes] if sizes is not None else [int(np.floor(d * s)) for d, s in zip(x.shape, scales)]
    imp.emit("ResizeNd", name, [n.input[0]], [n.output[0]],
             dict(mode=mode, coord=coord, nearest=nearest, scales=scales, out=out))


def _source(i_out: np.ndarray, size_in: int, size_out: int, scale: float, coord: str) -> np.ndarray:
    x = i_out.astype(np.float64)
    if coord == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if coord == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if size_out > 1 else np.zeros_like(x)
    if coord == "align_corners":  # ONNX divides by the unrounded output length, size_in * scale - 1
        span = size_in * scale - 1
        return x * (size_in - 1) / span if size_out > 1 and span > 0 else np.zeros_like(x)
    if coord == "tf_half_pixel_for_nearest":
        return (x + 0.5) / scale
    return x / scale


def _run_resize(node: Node, args: list, k) -> np.ndarray:
    y, a = np.asarray(args[0]), node.attrs
    for d, (size_out, scale) in enumerate(zip(a["out"], a["scales"])):
        size_in = y.shape[d]
        if size_in == size_out and scale == 1.0:
            continue
        src = _source(np.arange(size_out), size_in, size_out, scale, a["coord"])
        if a["mode"] == "nearest":
            r = {"round_prefer_floor": np.ceil(src - 0.5), "round_prefer_ceil": np.floor(src + 0.5),
                 "floor": np.floor(src), "ceil": np.ceil(src)}[a["nearest"]]
            y = np.take(y, np.clip(r, 0, size_in - 1).astype(np.int64), axis=d)
        else:
            src = np.clip(src, 0, size_in - 1)
            i0 = np.floor(src).astype(np.int64)
            i1 = np.minimum(i0 + 1, size_in - 1)
            wt = (src - i0).reshape([-1 if e == d else 1 for e in range(y.ndim)])
            y = (np.take(y, i0, axis=d) * (1 - wt) + np.take(y, i1, axis=d) * wt).astype(y.dtype)
    return contiguous(y)


def _infer_resize(node: Node, g: Graph) -> list[TensorInfo]:
    return [TensorInfo(tuple(node.attrs["out"]), g.tensors[node.inputs[0]].dtype)]


register(OpDef("LRN", same, _run_lrn, Precision.FLOAT, ("LRN",), _convert_lrn, (1, 13), kernel="numpy"))
register(OpDef("InstanceNormalization", same, _run_instnorm, Precision.FLOAT, ("InstanceNormalization",),
               _convert_instnorm, (1, 6, 22), kernel="numpy"))
register(OpDef("LayerNormalization", same, _run_layernorm, Precision.FLOAT, ("LayerNormalization",),
               _convert_layernorm, (17,), kernel="numpy"))
register(OpDef("ConvTranspose", _infer_convtranspose, _run_convtranspose, Precision.FLOAT, ("ConvTranspose",),
               _convert_convtranspose, (1, 11, 22), kernel="numpy"))
register(OpDef("ResizeNd", _infer_resize, _run_resize, Precision.FLOAT, ("Resize", "Upsample"), _convert_resize,
               (7, 9, 10, 11, 13, 18, 19), kernel="numpy", doc="nearest/linear; other modes run generically"))

# Taken explicitly through onnx.reference (correct, slow until they get kernels).
for _op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1",
            "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK", "Split", "Slice", "Gather",
            "Tile", "Expand", "ConstantOfShape", "Range", "Shape", "Size", "NonZero",
            "ScatterND", "CumSum", "LpNormalization", "OneHot", "Trilu", "Mod",
            "Round", "Sign", "IsNaN", "Hardmax", "LogSoftmax", "DepthToSpace", "SpaceToDepth"):
    generic_def(_op)
