"""Window ops: Conv, MaxPool, AveragePool, GlobalAveragePool and the quantizer's QConv.

Imported with kernel, strides, pads (top, left, bottom, right) and dilations
normalised once (auto_pad resolved against the input size)."""

from __future__ import annotations

from vtakit.compiler.ops.epilogues import host_epilogue, run_requantized
from vtakit.compiler.ops.epilogues import run_wide_conv
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.global_pool import convert_global_pool
from vtakit.compiler.ops.onnx_reference import convert_generic
from vtakit.compiler.ops.registry import FLOAT32, FLOAT32_INT8, OpDef, auto_pad, Precision, fail, register
from vtakit.errors import CompileError
from vtakit.isa.arith import ceil_div


def pool_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int = 1,
             ceil_mode: bool = False) -> int:
    """Output length of a convolution or pooling window along one axis (ONNX rules)."""
    span = dilation * (k - 1) + 1
    num = size + pad_lo + pad_hi - span
    out = (ceil_div(num, stride) if ceil_mode else num // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1  # the last window must start inside the input or its left padding
    return out


def pair(v, default) -> tuple[int, int]:
    v = list(v) if v is not None else list(default)
    if len(v) not in (1, 2):
        raise ValueError(f"expected one or two values for a 2-D window, got {v}")
    return int(v[0]), int(v[-1])


def same_pads(size, kernel, strides, dil, upper: bool) -> tuple[int, int, int, int]:
    lo, hi = [], []
    for s, k, st, d in zip(size, kernel, strides, dil):
        out = ceil_div(s, st)
        total = max((out - 1) * st + d * (k - 1) + 1 - s, 0)
        small, big = total // 2, total - total // 2
        lo.append(small if upper else big)
        hi.append(big if upper else small)
    return (lo[0], lo[1], hi[0], hi[1])


def _spatial(node: Node, x: TensorInfo, kernel, strides, pads, dilations, ceil_mode=False) -> tuple[int, int]:
    if len(x.shape) != 4:
        raise fail(node, f"needs a 4-D NCHW input, got shape {x.shape}")
    _, _, h, w = x.shape
    oh = pool_out(h, kernel[0], strides[0], pads[0], pads[2], dilations[0], ceil_mode)
    ow = pool_out(w, kernel[1], strides[1], pads[1], pads[3], dilations[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise fail(node, f"window {tuple(kernel)} with pads {tuple(pads)} does not fit a {h}x{w} input")
    return oh, ow


def window_attrs(imp, op: str, name: str, ins: list[str], at: dict) -> dict:
    """kernel, strides, pads (t, l, b, r), dilations of a 2-D window op, auto_pad resolved."""
    x = imp.graph.tensors[ins[0]]
    if len(x.shape) != 4:
        raise CompileError(f"only 2-D (NCHW) {op} is supported, input shape {x.shape}", node=name, op=op)
    kernel = tuple(at["kernel_shape"]) if "kernel_shape" in at else imp.graph.tensors[ins[1]].shape[2:]
    return _window(x.shape[2:], kernel, at)


def _as_2d(at: dict) -> dict:
    """A 1-D window's attributes as those of the (k, 1) 2-D window over the (N, C, L, 1) view."""
    out = dict(at)
    for key in ("kernel_shape", "strides", "dilations"):
        if key in at:
            out[key] = (int(at[key][0]), 1)
    if "pads" in at:
        out["pads"] = (int(at["pads"][0]), 0, int(at["pads"][1]), 0)
    return out


def _window(size, kernel, at: dict) -> dict:
    strides = pair(at.get("strides"), (1, 1))
    dil = pair(at.get("dilations"), (1, 1))
    pads = tuple(int(p) for p in at.get("pads", (0, 0, 0, 0)))
    auto = auto_pad(at)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(size, kernel, strides, dil, upper=auto == "SAME_UPPER")
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    return dict(kernel=tuple(int(k) for k in kernel), strides=strides, pads=pads, dilations=dil)


# ------------------------------------------------------------------------------------------- Conv
def _not_2d(imp, n, name: str, at: dict) -> bool:
    """1-D and 3-D windows run generically (onnx.reference) on the host."""
    if len(imp.graph.tensors[n.input[0]].shape) == 4:
        return False
    convert_generic(imp, n, name, at)
    return True


def _convert_conv1d(imp, n, name: str, at: dict) -> bool:
    """A 1-D convolution (N, C, L) with a constant weight imports as the 2-D one with a (k, 1) window over
    the (N, C, L, 1) view its tensors have on the accelerator (runtime.act_nchw): the same sums, so the 2-D
    passes, the quantizer and the accelerator take it; its input and output stay 3-D."""
    w = imp.graph.consts.get(n.input[1]) if len(n.input) > 1 else None
    if len(imp.graph.tensors[n.input[0]].shape) != 3 or w is None or w.ndim != 3:
        return False
    weight = imp.fresh_name(f"{n.input[1]}.as_2d")
    imp.set_const(weight, w[..., None], node=name, op="Conv")
    x = imp.graph.tensors[n.input[0]]
    attrs = _window((x.shape[2], 1), (w.shape[2], 1), _as_2d(at))
    attrs["group"] = int(at.get("group", 1))
    imp.emit("Conv", name, [n.input[0], weight, *n.input[2:3]], list(n.output)[:1], attrs)
    return True


def convert_conv(imp, n, name: str, at: dict, ins: list[str] | None = None, outs: list[str] | None = None) -> None:
    if ins is None and _convert_conv1d(imp, n, name, at):
        return
    if ins is None and _not_2d(imp, n, name, at):
        return
    ins = list(n.input) if ins is None else ins
    outs = list(n.output) if outs is None else outs
    attrs = window_attrs(imp, "Conv", name, ins, at)
    attrs["group"] = int(at.get("group", 1))
    imp.emit("Conv", name, ins[:3], outs[:1], attrs)


def _infer_conv(node: Node, g: Graph) -> list[TensorInfo]:
    x, w = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
    a = node.attrs
    if len(w.shape) != 4:
        raise fail(node, f"only 2-D convolutions are supported (weight shape {w.shape})")
    if x.shape[1] != w.shape[1] * a["group"]:
        raise fail(node, f"input has {x.shape[1]} channels, weight expects {w.shape[1]} x {a['group']} groups")
    if w.shape[0] % a["group"]:
        raise fail(node, f"{w.shape[0]} output channels do not split into {a['group']} groups")
    one_d = len(x.shape) == 3  # a 1-D convolution on the (N, C, L, 1) view (_convert_conv1d)
    if one_d:
        x = TensorInfo(x.shape + (1,), x.dtype)
    oh, ow = _spatial(node, x, w.shape[2:], a["strides"], a["pads"], a["dilations"])
    if "pool" in a:  # a fused max pool (passes.fusion)
        kernel, stride, pad = a["pool"]
        oh, ow = pool_out(oh, kernel, stride, pad, pad), pool_out(ow, kernel, stride, pad, pad)
    return [TensorInfo((x.shape[0], w.shape[0], oh) if one_d else (x.shape[0], w.shape[0], oh, ow), "float32")]


def _on_nchw(run):
    """A conv kernel run on the 4-D view of a 1-D convolution's 3-D tensors (_convert_conv1d)."""
    def wrapped(node: Node, args: list, k) -> object:
        if len(args[0].shape) != 3:
            return run(node, args, k)
        args = [args[0].reshape(tuple(args[0].shape) + (1,)), *args[1:3],
                *[r.reshape(tuple(r.shape) + (1,)) for r in args[3:4]]]  # the fused residual, 3-D too
        y = run(node, args, k)
        return y.reshape(tuple(y.shape)[:3])
    return wrapped


def _run_conv(node: Node, args: list, k) -> object:
    a = node.attrs
    return k.conv2d(args[0], args[1], args[2] if len(args) > 2 else None, stride=a["strides"], pads=a["pads"],
                    dilation=a["dilations"], groups=a["group"])


def _run_qconv(node: Node, args: list, k) -> object:
    a = node.attrs
    per_channel = host_epilogue(a) or "wide" in a  # the int32 convolution, then the per-channel epilogue
    y = k.conv2d(args[0], args[1], args[2] if len(args) > 2 else None, stride=a["strides"], pads=a["pads"],
                 dilation=a["dilations"], groups=a["group"], shift=None if per_channel else a.get("shift"),
                 clip=None if per_channel else a.get("clip"))
    if "wide" in a:  # a conv that keeps extra bits for its residual add (quant.techniques.wide_residual)
        y = run_wide_conv(node, y, k, args[3] if "residual" in a else None)
    elif per_channel:
        y = run_requantized(y, a, k)
    if "residual" in a and "wide" not in a:  # a residual add fused into the conv (passes.fusion): the QAdd's kernel after it
        shift, clip = a["residual"]
        y = k.add_int8(y, args[3], shift=shift, clip=tuple(clip))
    if "pool" in a:  # a max pool fused into the conv (passes.fusion): the MaxPool's kernel after it
        kernel, stride, pad = a["pool"]
        y = k.max_pool2d(y, kernel=(kernel, kernel), stride=(stride, stride), pads=(pad,) * 4, dilation=(1, 1),
                         ceil_mode=False)
    return y


def _weights_form(g: Graph, n: Node) -> bool:
    """Conv/Dense compute in int8 with constant weights and bias on an activation."""
    return g.is_const(n.inputs[1]) and all(g.is_const(i) for i in n.inputs[2:] if i) and not g.is_const(n.inputs[0])


# ---------------------------------------------------------------------------------------- pooling
def _convert_pool(imp, n, name: str, at: dict) -> None:
    if _not_2d(imp, n, name, at):
        return
    op, ins, outs = n.op_type, list(n.input), list(n.output)
    attrs = window_attrs(imp, op, name, ins, at)
    if op == "MaxPool":
        if (len(outs) > 1 and outs[1]) or at.get("storage_order", 0):  # indices: generically
            convert_generic(imp, n, name, at)
            return
        attrs["ceil_mode"] = bool(at.get("ceil_mode", 0))
    else:
        if attrs["dilations"] != (1, 1):  # dilated averaging (opset 19): generically
            convert_generic(imp, n, name, at)
            return
        attrs.update(ceil_mode=bool(at.get("ceil_mode", 0)), count_include_pad=bool(at.get("count_include_pad", 0)))
    if _covers_input(imp.graph.tensors[ins[0]].shape[2:], attrs):
        op = "GlobalAveragePool" if op == "AveragePool" else "GlobalMaxPool"
        imp.emit(op, name, ins[:1], outs[:1], {})
        return
    imp.emit(op, name, ins[:1], outs[:1], attrs)


def _covers_input(size, a: dict) -> bool:
    """Whether an unpadded window with ceil_mode is one window over the whole input (transformers'
    EfficientNet pools a 7x7 map with a 2560 window): the global pool it is, whatever the window's size."""
    return (a["ceil_mode"] and not any(a["pads"]) and a.get("dilations", (1, 1)) == (1, 1)
            and all(k >= n and pool_out(n, k, st, 0, 0, 1, True) == 1 for n, k, st in zip(size, a["kernel"], a["strides"])))


def _infer_pool(node: Node, g: Graph) -> list[TensorInfo]:
    x, a = g.tensors[node.inputs[0]], node.attrs
    oh, ow = _spatial(node, x, a["kernel"], a["strides"], a["pads"], a.get("dilations", (1, 1)),
                      a.get("ceil_mode", False))
    return [TensorInfo(x.shape[:2] + (oh, ow), x.dtype)]


def _run_maxpool(node: Node, args: list, k) -> object:
    a = node.attrs
    return k.max_pool2d(args[0], kernel=a["kernel"], stride=a["strides"], pads=a["pads"], dilation=a["dilations"],
                        ceil_mode=a["ceil_mode"])


def _run_avgpool(node: Node, args: list, k) -> object:
    a = node.attrs
    return k.avg_pool2d(args[0], kernel=a["kernel"], stride=a["strides"], pads=a["pads"],
                        count_include_pad=a["count_include_pad"], ceil_mode=a["ceil_mode"])


def _convert_plain(imp, n, name: str, at: dict) -> None:
    if len(imp.graph.tensors[n.input[0]].shape) != 4:  # other ranks: numpy (global_pool.py)
        convert_global_pool(imp, n, name, at)
        return
    imp.emit(n.op_type, name, list(n.input), list(n.output)[:1], {})


def _infer_gap(node: Node, g: Graph) -> list[TensorInfo]:
    x = g.tensors[node.inputs[0]]
    if len(x.shape) != 4:
        raise fail(node, f"needs a 4-D NCHW input, got shape {x.shape}")
    return [TensorInfo(x.shape[:2] + (1, 1), x.dtype)]


register(OpDef("Conv", _infer_conv, _on_nchw(_run_conv), Precision.INT8, ("Conv",), convert_conv, (1, 11, 22),
               int8_form=_weights_form, dtypes=FLOAT32, int8_op="QConv", int8_rule="weights"))
register(OpDef("QConv", _infer_conv, _on_nchw(_run_qconv), None))
register(OpDef("MaxPool", _infer_pool, _run_maxpool, Precision.NEUTRAL, ("MaxPool",), _convert_pool,
               (1, 8, 10, 11, 12, 22), dtypes=FLOAT32_INT8))
register(OpDef("AveragePool", _infer_pool, _run_avgpool, Precision.FLOAT, ("AveragePool",), _convert_pool,
               (1, 7, 10, 11, 19, 22), dtypes=FLOAT32))
register(OpDef("GlobalAveragePool", _infer_gap, lambda n, a, k: k.global_avg_pool(a[0]), Precision.FLOAT,
               ("GlobalAveragePool",), _convert_plain, (1, 22), dtypes=FLOAT32))
