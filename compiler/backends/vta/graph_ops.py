"""The VTA backend's side of the op registry: which graph nodes the accelerator takes (placement) and
each such node's operator program and how its tensors bind (lowering; `compiler/passes/lower.py` wraps
the result into a task).

The ops layer knows nothing of the accelerator: this module attaches a placement rule and a lowering
rule to the ops it takes (`ops.registry.accelerate`) when it is imported, as TVM's VTA registers its
strategies onto ops.  Partitioning imports it, so every graph that is placed has the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.ops import accelerate, op_def
from vtakit.compiler.quant.techniques.wide_residual import WIDE_ADD_REASON, WIDE_CONV_REASON
from vtakit.compiler.backends.vta.depthwise import compile_depthwise, depthwise_choice, depthwise_reason, pack_depthwise_weight
from vtakit.compiler.backends.vta.ops import compile_conv2d, compile_eltwise, conv_packing, fused_pool_reason
from vtakit.compiler.backends.vta.packing import ConvGeometry, ReductionPacking, packing
from vtakit.compiler.backends.vta.lowering import bias_fits, pack_bias_weight
from vtakit.compiler.backends.vta.runtime import WEIGHT_OPERAND, act_nchw, pack_bias, pack_weight
from vtakit.compiler.backends.vta.te import move_reason, split_channel_shift
from vtakit.isa.config import HwConfig


@dataclass
class AccelProgram:
    """One node compiled for the accelerator, before its tensors are bound to DRAM buffers."""

    op: Any                            # the compiled operator (its .program() is what the task runs)
    schedule: Any                      # the schedule it was compiled with
    consts: dict[str, np.ndarray]      # program tensor -> packed constant
    acts: dict[str, str]               # program tensor -> graph activation it reads
    macs: int
    packings: dict[str, str] = field(default_factory=dict)
    """program tensor -> host-side reduction packing of its activation (`ReductionPacking.to_spec`)"""


def lower_linear(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """QConv and QDense: a GEMM over packed weights with the requantizing epilogue (and a fused residual
    add, `residual` = the add's (shift, clip), reading the int8 tensor inputs[3]; a fused max pool,
    `pool` = (kernel, stride, pad))."""
    a = n.attrs
    x_shape = act_nchw(g.tensors[n.inputs[0]].shape)
    w = g.consts[n.inputs[1]]
    w4 = w.reshape(w.shape + (1, 1)) if w.ndim == 2 else w
    has_bias = len(n.inputs) > 2 and bool(n.inputs[2])
    stride = a["strides"][0] if n.op == "QConv" else 1
    pad = conv_padding(a["pads"]) if n.op == "QConv" else 0
    bias = g.consts[n.inputs[2]] if has_bias else None
    residual = (a["residual"][0], tuple(a["residual"][1])) if "residual" in a else None
    if residual is not None and "wide" in a:  # the conv's unclipped result plus res << k (quant/techniques/wide_residual.py)
        residual += (int(a.get("residual_bits", 0)),)
    shift, shift_vector = a.get("shift"), None
    if isinstance(shift, tuple):  # per output channel: an immediate common part, a vector in acc
        shift, shift_vector = split_channel_shift(cfg, shift, n.name)
    multiplier = a.get("multiplier")  # per-channel fixed-point multipliers (quant/techniques/fixed_point.py)
    pk = _host_packing(g, n, cfg, x_shape, w4.shape, stride, pad, bias, shift, schedule)
    p = pk.packed
    bias_gemm = has_bias and not pk.bias_lanes and bias_fits(cfg, bias)
    op, used = compile_conv2d(cfg, x_shape=p.x_shape, w_shape=p.w_shape, stride=p.stride, padding=p.padding,
                              bias=has_bias and not pk.bias_lanes, shift=shift,
                              clip=tuple(a["clip"]) if "clip" in a else None, schedule=schedule,
                              residual=residual, channel_shift=shift_vector is not None, bias_gemm=bias_gemm,
                              pool=tuple(a["pool"]) if "pool" in a else None, multiplier=multiplier is not None,
                              pre_shift=a.get("pre_shift", 0), name=n.name)
    consts = {"weight": pack_weight(pk.weight(w4, bias), cfg.block_out, cfg.block_in)}
    if has_bias and not pk.bias_lanes:
        consts["bias"] = pack_bias_weight(bias, cfg) if bias_gemm else pack_bias(bias, cfg.batch, cfg.block_out)
    if shift_vector is not None:
        consts["shift"] = pack_bias(shift_vector, cfg.batch, cfg.block_out)
    if multiplier is not None:
        consts["mult"] = pack_bias(np.asarray(multiplier, np.int32), cfg.batch, cfg.block_out)
    oh, ow = op.compute.out.tensor.shape[2:]   # the convolution's output, before a fused pool
    macs = x_shape[0] * w4.shape[0] * oh * ow * x_shape[1] * w4.shape[2] * w4.shape[3]
    packings = {"data": pk.to_spec()} if pk.kind != "none" else {}
    acts = {"data": n.inputs[0]}
    if residual is not None:  # the fused residual add's other operand (passes.fusion)
        acts["res"] = n.inputs[3]
    return AccelProgram(op, used, consts, acts, macs, packings)


def conv_padding(pads) -> int | tuple[int, int, int, int]:
    """A QConv's pads as the accelerator's convolution takes them: one value, or (top, left, bottom, right)."""
    return int(pads[0]) if len(set(pads)) == 1 else tuple(int(p) for p in pads)


def is_depthwise(g: Graph, n: Node) -> bool:
    """A QConv with one input channel per group and one output channel per input channel."""
    w = g.consts.get(n.inputs[1])
    x = g.tensors[n.inputs[0]].shape
    return (n.attrs["group"] > 1 and w is not None and w.shape[1] == 1 and w.shape[0] == n.attrs["group"]
            and len(x) in (3, 4) and x[1] == n.attrs["group"])  # 3-D: a 1-D one (ops/window.py)


def _depthwise_args(g: Graph, n: Node, cfg: HwConfig) -> tuple[dict, np.ndarray | None]:
    """compile_depthwise's arguments for a depthwise QConv, and its per-channel shift vector (or None); the
    bias is added by GEMM where it fits the lanes (`lowering.bias_fits`), as in `lower_linear`."""
    a = n.attrs
    shift, shift_vector = a.get("shift"), None
    if isinstance(shift, tuple):
        shift, shift_vector = split_channel_shift(cfg, shift, n.name)
    bias = g.consts[n.inputs[2]] if len(n.inputs) > 2 and n.inputs[2] else None
    return dict(x_shape=act_nchw(g.tensors[n.inputs[0]].shape), kernel=tuple(a["kernel"]), stride=a["strides"][0],
                pads=tuple(a["pads"]), bias=bias is not None, shift=shift,
                clip=tuple(a["clip"]) if "clip" in a else None, channel_shift=shift_vector is not None,
                pre_shift=a.get("pre_shift", 0) if "multiplier" in a else None, bias_gemm=bias_fits(cfg, bias),
                name=n.name), shift_vector


def place_depthwise(g: Graph, n: Node, cfg: HwConfig, cost: bool = True) -> str | None:
    """Why a grouped QConv stays on the host (None: the accelerator takes it as a block-diagonal GEMM,
    where the cycle model puts it cheaper than the host round trip, `depthwise.depthwise_choice`; with
    `cost` False, wherever it can)."""
    if not is_depthwise(g, n):
        return "grouped convolution (only depthwise: one input channel per group)"
    if g.tensors[n.inputs[0]].dtype != "int8":
        return FLOAT_INPUT
    reason = depthwise_reason(cfg)
    if reason or not cost:
        return reason
    args, _ = _depthwise_args(g, n, cfg)
    return depthwise_choice(cfg, **args)


def lower_depthwise(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """A depthwise QConv: a block-diagonal GEMM over the kernel window with the requantizing epilogue
    (`compiler/backends/vta/depthwise.py`)."""
    args, shift_vector = _depthwise_args(g, n, cfg)
    op, used = compile_depthwise(cfg, schedule=schedule, **args)
    w = g.consts[n.inputs[1]]
    consts = {"weight": pack_depthwise_weight(w, cfg.block_out)}
    if args["bias"]:
        bias = g.consts[n.inputs[2]]
        consts["bias"] = pack_bias_weight(bias, cfg) if args["bias_gemm"] else pack_bias(bias, cfg.batch, cfg.block_out)
    if shift_vector is not None:
        consts["shift"] = pack_bias(shift_vector, cfg.batch, cfg.block_out)
    if "multiplier" in n.attrs:
        consts["mult"] = pack_bias(np.asarray(n.attrs["multiplier"], np.int32), cfg.batch, cfg.block_out)
    macs = int(np.prod(act_nchw(g.tensors[n.outputs[0]].shape), dtype=np.int64)) * w.shape[2] * w.shape[3]
    return AccelProgram(op, used, consts, {"data": n.inputs[0]}, macs)


def lower_qconv(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """QConv: depthwise ones as block-diagonal GEMMs, the others as a GEMM over the packed weights."""
    if n.attrs["group"] != 1:
        return lower_depthwise(g, n, cfg, schedule)
    return lower_linear(g, n, cfg, schedule)


def _host_packing(g: Graph, n: Node, cfg: HwConfig, x_shape, w_shape, stride: int, pad: int,
                  bias: np.ndarray | None, shift: int | None, schedule: dict | None) -> ReductionPacking:
    """The reduction packing of a QConv whose data the host writes (a graph input, or the result of a
    node the accelerator cannot take), so the host lays it out packed at no extra crossing; every other
    conv (one with a tuned schedule, which names the unpacked shape, or a fused residual add) is left
    unpacked."""
    plain = packing("none", ConvGeometry(tuple(x_shape), tuple(w_shape), stride, pad))
    producer = g.producer(n.inputs[0])  # not g.producers(): a walk over the graph per conv
    if n.op != "QConv" or schedule is not None or "residual" in n.attrs or (
            producer is not None and accelerator_reason(g, producer, cfg) is None):
        return plain
    a = n.attrs
    return conv_packing(cfg, x_shape=x_shape, w_shape=w_shape, stride=stride, padding=pad, bias=bias,
                        shift=shift, clip=tuple(a["clip"]) if "clip" in a else None, name=n.name)


def pool_fusion_reason(g: Graph, n: Node, cfg: HwConfig, window: tuple[int, int, int]) -> str | None:
    """Why the QConv `n`'s task cannot take a max pool `window` (kernel, stride, pad) on `cfg`, in the
    geometry `lower_linear` compiles (packed where the host writes its input); None if it can."""
    a = n.attrs
    w = g.consts[n.inputs[1]]
    shift = a.get("shift")
    per_channel = isinstance(shift, tuple)
    if per_channel:
        shift, _ = split_channel_shift(cfg, shift, n.name)
    bias = g.consts[n.inputs[2]] if len(n.inputs) > 2 and n.inputs[2] else None
    pk = _host_packing(g, n, cfg, act_nchw(g.tensors[n.inputs[0]].shape), w.shape, a["strides"][0], a["pads"][0], bias,
                       shift, None)
    p = pk.packed
    return fused_pool_reason(cfg, x_shape=p.x_shape, w_shape=p.w_shape, stride=p.stride, padding=p.padding,
                             pool=window, residual="residual" in a, channel_shift=per_channel,
                             multiplier="multiplier" in a, name=n.name)


def lower_add(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """QAdd: the saturating residual add on the tensor ALU."""
    a = n.attrs
    op, used = compile_eltwise(cfg, "add", shape=act_nchw(g.tensors[n.inputs[0]].shape), inputs=("a", "b"),
                               shift=a.get("shift") or None, clip=tuple(a["clip"]), schedule=schedule, name=n.name)
    return AccelProgram(op, used, {}, {"a": n.inputs[0], "b": n.inputs[1]}, 0)


def lower_relu(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """Relu of an int8 tensor: ALU MAX with 0."""
    op, used = compile_eltwise(cfg, "relu", shape=act_nchw(g.tensors[n.inputs[0]].shape), inputs=("a",),
                               schedule=schedule, name=n.name)
    return AccelProgram(op, used, {}, {"a": n.inputs[0]}, 0)


def lower_maxpool(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """Square, symmetric MaxPool of an int8 tensor: ALU MAX over the window."""
    a = n.attrs
    window = (a["kernel"][0], a["strides"][0], a["pads"][0])
    op, used = compile_eltwise(cfg, "max_pool2d", shape=act_nchw(g.tensors[n.inputs[0]].shape), inputs=("data",),
                               window=window, schedule=schedule, name=n.name)
    return AccelProgram(op, used, {}, {"data": n.inputs[0]}, 0)


# ------------------------------------------------------------------------------------------ placement
NO_FORM = "no accelerator form"
FLOAT_INPUT = "its input is float (the accelerator computes on int8)"


def accelerator_reason(g: Graph, n: Node, cfg: HwConfig) -> str | None:
    """None when the accelerator can run the node, else why not (shown in the report): the op's
    placement rule (`OpDef.accel`, attached below)."""
    d = op_def(n.op, n)
    if d.accel is None:
        return NO_FORM
    return d.accel(g, n, cfg)


def refusal_reason(g: Graph, n: Node, cfg: HwConfig) -> str | None:
    """`accelerator_reason` without its cost comparisons (a depthwise conv the cycle model puts cheaper on
    the host can still run there): why the accelerator cannot take the node at all, or None."""
    return place_qconv(g, n, cfg, cost=False) if n.op == "QConv" else accelerator_reason(g, n, cfg)


def lowering_rule(n: Node) -> Callable[..., AccelProgram] | None:
    """The node's op's lowering rule, None when the accelerator takes no such op."""
    return op_def(n.op, n).lower


def acc8_reason(cfg: HwConfig) -> str | None:
    """Why an op that loads int8 tensors into the accumulator cannot run on `cfg` (None if it can):
    by LOAD.ACC8, or on VTA's hardware by an INP load and an identity GEMM."""
    return move_reason(cfg)


def place_qadd(g: Graph, n: Node, cfg) -> str | None:
    if acc8_reason(cfg):
        return acc8_reason(cfg)
    shapes = {g.tensors[i].shape for i in n.inputs}
    if len(shapes) != 1:
        return "broadcasting add"
    if not next(iter(shapes)):
        return "scalar add"
    return WIDE_ADD_REASON if "left" in n.attrs else None


def place_relu(g: Graph, n: Node, cfg) -> str | None:
    if acc8_reason(cfg):
        return acc8_reason(cfg)
    x = g.tensors[n.inputs[0]]
    if x.dtype != "int8":
        return FLOAT_INPUT
    return None if x.shape else "scalar relu"


def place_qconv(g: Graph, n: Node, cfg, cost: bool = True) -> str | None:
    a = n.attrs
    if a["dilations"] != (1, 1) and list(a["dilations"]) != [1, 1]:
        return "dilated convolution"
    if a["strides"][0] != a["strides"][1] and not _width_one(g, n):
        return "different strides along H and W"
    if a["group"] != 1:
        return place_depthwise(g, n, cfg, cost)
    return WIDE_CONV_REASON if "wide" in a and "residual" not in a else None


def _width_one(g: Graph, n: Node) -> bool:
    """Whether a conv's output is one column wide by its geometry (a 1-D conv's (N, C, L, 1) view, a (k, 1)
    kernel, no padding along W): its stride along W then changes nothing, and the H stride serves for both."""
    a = n.attrs
    return act_nchw(g.tensors[n.inputs[0]].shape)[3] == 1 and a["kernel"][1] == 1 and a["pads"][1] == a["pads"][3] == 0


def place_maxpool(g: Graph, n: Node, cfg) -> str | None:
    if g.tensors[n.inputs[0]].dtype != "int8":
        return FLOAT_INPUT
    if acc8_reason(cfg):
        return acc8_reason(cfg)
    a = n.attrs
    k, st, pads = a["kernel"], a["strides"], a["pads"]
    if k[0] != k[1] or st[0] != st[1] or len(set(pads)) != 1 or a.get("ceil_mode") \
            or tuple(a.get("dilations", (1, 1))) != (1, 1):
        return "non-square, dilated, ceil-mode or asymmetric pooling"
    if pads[0] >= k[0]:
        return "padding as large as the window"
    return None


def place_dense(g: Graph, n: Node, cfg: HwConfig) -> str | None:
    """A QDense (and a QActDense) always fits: its rows as a 1 x M image through the GEMM core."""
    return None


def lower_act_dense(g: Graph, n: Node, cfg: HwConfig, schedule: dict | None) -> AccelProgram:
    """QActDense: a dense layer whose weights are an activation, which the host writes in the weight layout
    (`runtime.WEIGHT_OPERAND`); no shift leaves the int32 product (byte planes) for a float reader."""
    a = n.attrs
    x_shape = act_nchw(g.tensors[n.inputs[0]].shape)
    outputs, inner = g.tensors[n.inputs[1]].shape
    op, used = compile_conv2d(cfg, x_shape=x_shape, w_shape=(outputs, inner, 1, 1), shift=a.get("shift"),
                              clip=tuple(a["clip"]) if "clip" in a else None, schedule=schedule, name=n.name)
    macs = x_shape[3] * outputs * inner
    return AccelProgram(op, used, {}, {"data": n.inputs[0], "weight": n.inputs[1]}, macs,
                        {"weight": WEIGHT_OPERAND})


accelerate("QConv", place_qconv, lower_qconv)
accelerate("QDense", place_dense, lower_linear)
accelerate("QActDense", place_dense, lower_act_dense)
accelerate("QAdd", place_qadd, lower_add)
accelerate("Relu", place_relu, lower_relu)
accelerate("MaxPool", place_maxpool, lower_maxpool)
