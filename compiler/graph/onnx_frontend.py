"""ONNX (opsets 11-21) -> graph IR, with attributes normalised and shapes inferred.

Everything opset-specific happens here, once: Clip bounds and Pad amounts that
moved from attributes to inputs, Softmax's pre-13 axis semantics, auto_pad,
Reshape's 0/-1 entries.  Squeeze/Unsqueeze become the Reshape they are and
(inference) Dropout an Identity.  The quantized ONNX forms (QLinearConv, QLinearMatMul)
become DequantizeLinear -> float op -> QuantizeLinear, so the rest of the
compiler sees one float graph and quantizes it with its own power-of-two scheme.
An unsupported op type stops the compile before any work, listing every one.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.graph.ir import Graph, Node, TensorInfo
from vtakit.compiler.graph.shapes import infer
from vtakit.isa.arith import ceil_div

SUPPORTED = (
    "Conv", "Gemm", "MatMul", "Relu", "Clip", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
    "BatchNormalization", "Flatten", "Reshape", "Transpose", "Concat", "Softmax", "Pad", "Identity",
    "Squeeze", "Unsqueeze", "Dropout",
    "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "Constant",
)


class Precision(str, Enum):
    """How an op relates to int8 (see `PRECISION`; `quantize.precision_plan` applies the rule)."""

    NEUTRAL = "precision-neutral"  # moves or selects values: runs in the precision of its input
    INT8 = "int8-capable"  # computes in int8 (on the accelerator or a host int8 kernel) when its form allows
    FLOAT = "float-only"  # no int8 form: always runs in float on the host


PRECISION: dict[str, Precision] = {
    # Precision-neutral: each output value is an input value (layout, selection, relu/clip's max/min
    # with a constant, padding with a constant).  Rounding to a power-of-two grid is monotone, so
    # these commute with quantization: in int8 they keep the input's scale (the quantizer unions
    # their tensors into one exponent group) and add no rounding of their own; in float they add
    # none either.  So they never decide where a tensor becomes int8: they follow their input.
    # Concat of float tensors stays float; MaxPool, Relu and Clip run on the accelerator when int8.
    "Identity": Precision.NEUTRAL, "Dropout": Precision.NEUTRAL,  # Dropout imports as Identity
    "Flatten": Precision.NEUTRAL, "Reshape": Precision.NEUTRAL, "Transpose": Precision.NEUTRAL,
    "Squeeze": Precision.NEUTRAL, "Unsqueeze": Precision.NEUTRAL,  # import as Reshape
    "Concat": Precision.NEUTRAL, "Pad": Precision.NEUTRAL,
    "Relu": Precision.NEUTRAL, "Clip": Precision.NEUTRAL, "MaxPool": Precision.NEUTRAL,
    # int8-capable: the arithmetic the accelerator exists for; each rescales (conv/dense: by the
    # weight's exponent, add: two inputs onto one grid) and is where int8 pays.  Conv/Dense need
    # constant weights and bias, Add two same-shape activations; otherwise they run in float.
    "Conv": Precision.INT8, "Dense": Precision.INT8, "Add": Precision.INT8,
    "Gemm": Precision.INT8, "MatMul": Precision.INT8,  # as Dense when B is constant (fold.canonicalize_dense)
    "QLinearConv": Precision.INT8, "QLinearMatMul": Precision.INT8,  # their float op, re-quantized
    # float-only: averaging and exponentials lose range or resolution on a fixed int8 grid
    # (average pooling shrinks the range, softmax needs its small values); a free-standing Mul or
    # batch norm has no int8 form here; QDQ pairs are stripped, any left are float arithmetic.
    "Softmax": Precision.FLOAT, "AveragePool": Precision.FLOAT, "GlobalAveragePool": Precision.FLOAT,
    "Mul": Precision.FLOAT, "BatchNormalization": Precision.FLOAT,
    "QuantizeLinear": Precision.FLOAT, "DequantizeLinear": Precision.FLOAT,
}
"""The precision class of every op the compiler knows, by op name (ONNX ops and the IR's Dense).

This is the one declaration the quantizer reads (quantize.precision_plan); an op missing here
is float-only.  It sits beside `SUPPORTED` so that an op registry can absorb both tables.
`Constant` is absent: it becomes a constant, not a node."""
OPSETS = range(11, 22)
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64"}


def load_model(source):
    """An onnx.ModelProto from a path, bytes or a ModelProto; malformed files are one CompileError."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        try:
            data = source if isinstance(source, bytes) else Path(source).read_bytes()
        except OSError as e:
            raise CompileError(f"cannot read ONNX file {source}: {e.strerror}") from None
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise CompileError(f"{source}: not a valid ONNX file ({type(e).__name__}: {e})") from None
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises ValidationError or C++-bound errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CompileError(f"malformed ONNX model: {first}") from None
    if not model.graph.node:
        raise CompileError("ONNX model has no nodes (empty or truncated file)")
    return model


def _opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            if imp.version not in OPSETS:
                raise CompileError(f"ONNX opset {imp.version} is not supported (use {OPSETS.start}-{OPSETS.stop - 1})")
            return imp.version
    raise CompileError("ONNX model imports no default-domain opset")


def _check_ops(model) -> None:
    bad: dict[str, list[str]] = {}
    for i, n in enumerate(model.graph.node):
        if n.op_type not in SUPPORTED or n.domain not in ("", "ai.onnx"):
            bad.setdefault(f"{n.domain + '.' if n.domain else ''}{n.op_type}", []).append(n.name or f"#{i}")
    if bad:
        listing = "; ".join(f"{op} ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})"
                            for op, names in sorted(bad.items()))
        raise CompileError(f"unsupported ONNX ops: {listing}")


def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pair(v, default) -> tuple[int, int]:
    v = list(v) if v is not None else list(default)
    if len(v) not in (1, 2):
        raise ValueError(f"expected one or two values for a 2-D window, got {v}")
    return int(v[0]), int(v[-1])


class _Importer:
    def __init__(self, model, input_shapes: dict[str, tuple[int, ...]] | None):
        import onnx.numpy_helper as nh

        self.model = model
        self.opset = _opset(model)
        g = model.graph
        self.graph = Graph([], {}, [], [], {}, name=g.name or "model")
        for init in g.initializer:
            arr = nh.to_array(init)
            self.graph.consts[init.name] = arr
            self.graph.tensors[init.name] = TensorInfo(arr.shape, arr.dtype.name)
        overrides = dict(input_shapes or {})
        self.defaulted: list[str] = []
        for vi in g.input:
            if vi.name in self.graph.consts:
                continue
            self.graph.inputs.append(vi.name)
            self.graph.tensors[vi.name] = self._input_info(vi, overrides.pop(vi.name, None))
        if overrides:
            raise CompileError(f"input_shapes names unknown inputs {sorted(overrides)}; the model's inputs "
                               f"are {self.graph.inputs}")
        self.graph.outputs = [o.name for o in g.output]
        self.names: set[str] = set()

    def _input_info(self, vi, override) -> TensorInfo:
        tt = vi.type.tensor_type
        dtype = _DTYPES.get(tt.elem_type)
        if dtype not in ("float32", "int8", "uint8"):
            raise CompileError(f"input {vi.name!r} has element type {tt.elem_type}; float32, int8 or uint8 expected")
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(1)
                self.defaulted.append(f"{vi.name}:{d.dim_param or '?'}")
        if override is not None:
            override = tuple(int(s) for s in override)
            if len(override) != len(dims) or any(s < 1 for s in override):
                raise CompileError(f"input_shapes[{vi.name!r}] = {override} does not match the model's rank "
                                   f"{len(dims)}")
            fixed = [i for i, d in enumerate(tt.shape.dim) if d.HasField("dim_value") and d.dim_value > 0]
            if any(override[i] != dims[i] for i in fixed):
                raise CompileError(f"input_shapes[{vi.name!r}] = {override} contradicts the model's shape "
                                   f"{tuple(dims)}")
            dims = list(override)
            self.defaulted = [d for d in self.defaulted if not d.startswith(vi.name + ":")]
        return TensorInfo(tuple(dims), dtype)

    # ---------------------------------------------------------------- nodes
    def node_name(self, n, index: int) -> str:
        base = n.name or f"{n.op_type}_{index}"
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def emit(self, op: str, name: str, inputs: list[str], outputs: list[str], attrs: dict) -> None:
        node = Node(op, name, inputs, outputs, attrs)
        for i in inputs:
            if i and i not in self.graph.tensors:
                raise CompileError(f"reads {i!r}, which no earlier node produces", node=name, op=op)
        for out, info in zip(outputs, infer(node, self.graph)):
            self.graph.tensors[out] = info
        self.graph.nodes.append(node)

    def const_input(self, n, name: str, idx: int, what: str):
        if idx >= len(n.input) or not n.input[idx]:
            return None
        if n.input[idx] not in self.graph.consts:
            raise CompileError(f"{what} must be a constant initializer", node=name, op=n.op_type)
        return self.graph.consts[n.input[idx]]

    def run(self) -> Graph:
        for index, n in enumerate(self.model.graph.node):
            name = self.node_name(n, index)
            try:
                self.convert(n, name, _attrs(n))
            except CompileError:
                raise
            except (KeyError, ValueError, IndexError, TypeError) as e:
                raise CompileError(f"bad attributes or inputs ({type(e).__name__}: {e})", node=name,
                                   op=n.op_type) from None
        for o in self.graph.outputs:
            if o not in self.graph.tensors:
                raise CompileError(f"graph output {o!r} is never produced")
        return self.graph

    def convert(self, n, name: str, at: dict) -> None:  # noqa: C901 - one case per op, read top to bottom
        op, ins, outs = n.op_type, list(n.input), list(n.output)
        g = self.graph
        if op == "Constant":
            import onnx.numpy_helper as nh

            if "value" not in at:
                raise CompileError("only tensor-valued Constant nodes are supported", node=name, op=op)
            arr = nh.to_array(at["value"])
            g.consts[outs[0]] = arr
            g.tensors[outs[0]] = TensorInfo(arr.shape, arr.dtype.name)
            return
        x = g.tensors.get(ins[0]) if ins and ins[0] else None
        if op in ("Conv", "MaxPool", "AveragePool"):
            self._window_op(op, name, ins, outs, at)
        elif op in ("Relu", "Identity", "GlobalAveragePool", "Add", "Mul"):
            self.emit(op, name, ins, outs[:1], {})
        elif op == "Clip":
            lo, hi = at.get("min", -np.inf), at.get("max", np.inf)
            if self.opset >= 11:
                lo_c, hi_c = self.const_input(n, name, 1, "Clip min"), self.const_input(n, name, 2, "Clip max")
                lo = float(lo_c) if lo_c is not None else -np.inf
                hi = float(hi_c) if hi_c is not None else np.inf
            self.emit("Clip", name, ins[:1], outs[:1], dict(lo=float(lo), hi=float(hi)))
        elif op == "Gemm":
            attrs = dict(alpha=float(at.get("alpha", 1.0)), beta=float(at.get("beta", 1.0)),
                         transA=bool(at.get("transA", 0)), transB=bool(at.get("transB", 0)))
            self.emit("Gemm", name, ins[:3], outs[:1], attrs)
        elif op == "MatMul":
            self.emit("MatMul", name, ins[:2], outs[:1], {})
        elif op == "BatchNormalization":
            if at.get("training_mode", 0):
                raise CompileError("training-mode BatchNormalization is not supported", node=name, op=op)
            if len([o for o in outs if o]) > 1:
                raise CompileError("BatchNormalization's running-statistics outputs are not supported",
                                   node=name, op=op)
            for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
                self.const_input(n, name, i, f"BatchNormalization {what}")
            self.emit(op, name, ins[:5], outs[:1], dict(epsilon=float(at.get("epsilon", 1e-5))))
        elif op == "Flatten":
            axis = int(at.get("axis", 1))
            axis = axis + len(x.shape) if axis < 0 else axis
            self.emit(op, name, ins[:1], outs[:1], dict(axis=axis))
        elif op == "Reshape":
            shape = [int(s) for s in self.const_input(n, name, 1, "Reshape shape")]
            self.emit(op, name, ins[:1], outs[:1], dict(shape=_reshape_target(x.shape, shape,
                                                                             bool(at.get("allowzero", 0)))))
        elif op in ("Squeeze", "Unsqueeze"):
            self.emit("Reshape", name, ins[:1], outs[:1], dict(shape=self._squeeze_target(n, name, op, x, at)))
        elif op == "Dropout":
            if len(outs) > 1 and outs[1]:
                raise CompileError("Dropout's mask output is not supported", node=name, op=op)
            training = self.const_input(n, name, 2, "Dropout training_mode")
            if training is not None and bool(training):
                raise CompileError("training-mode Dropout is not supported", node=name, op=op)
            self.emit("Identity", name, ins[:1], outs[:1], {})
        elif op == "Transpose":
            perm = [int(p) for p in at.get("perm", range(len(x.shape) - 1, -1, -1))]
            self.emit(op, name, ins[:1], outs[:1], dict(perm=perm))
        elif op == "Concat":
            axis = int(at["axis"])
            self.emit(op, name, ins, outs[:1], dict(axis=axis + len(x.shape) if axis < 0 else axis))
        elif op == "Softmax":
            axis = int(at.get("axis", -1 if self.opset >= 13 else 1))
            axis = axis + len(x.shape) if axis < 0 else axis
            legacy = self.opset < 13 and axis != len(x.shape) - 1
            self.emit(op, name, ins[:1], outs[:1], dict(axis=axis, legacy=legacy))
        elif op == "Pad":
            mode = at.get("mode", b"constant")
            mode = mode.decode() if isinstance(mode, bytes) else mode
            if mode != "constant":
                raise CompileError(f"Pad mode {mode!r} is not supported (constant only)", node=name, op=op)
            pads = [int(p) for p in self.const_input(n, name, 1, "Pad pads")]
            value = self.const_input(n, name, 2, "Pad constant_value")
            if len(ins) > 3 and ins[3]:
                raise CompileError("Pad with axes is not supported", node=name, op=op)
            if min(pads) < 0:
                raise CompileError(f"negative pads {pads} are not supported", node=name, op=op)
            self.emit(op, name, ins[:1], outs[:1], dict(pads=pads, value=float(value) if value is not None else 0.0))
        elif op in ("QuantizeLinear", "DequantizeLinear"):
            self._quant_linear(n, name, op, ins, outs, at)
        elif op == "QLinearConv":
            self._qlinear(n, name, "Conv", at)
        elif op == "QLinearMatMul":
            self._qlinear(n, name, "MatMul", at)

    def _squeeze_target(self, n, name: str, op: str, x: TensorInfo, at: dict) -> tuple[int, ...]:
        """Squeeze/Unsqueeze as the Reshape they are (axes moved from an attribute to an input in opset 13)."""
        axes = at.get("axes") if self.opset < 13 else self.const_input(n, name, 1, f"{op} axes")
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

    def _window_op(self, op: str, name: str, ins: list[str], outs: list[str], at: dict) -> None:
        """Conv, MaxPool, AveragePool: kernel, strides, pads (top, left, bottom, right), dilations."""
        x = self.graph.tensors[ins[0]]
        if len(x.shape) != 4:
            raise CompileError(f"only 2-D (NCHW) {op} is supported, input shape {x.shape}", node=name, op=op)
        kernel = tuple(at["kernel_shape"]) if "kernel_shape" in at else self.graph.tensors[ins[1]].shape[2:]
        strides = _pair(at.get("strides"), (1, 1))
        dil = _pair(at.get("dilations"), (1, 1))
        pads = tuple(int(p) for p in at.get("pads", (0, 0, 0, 0)))
        auto = at.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = _same_pads(x.shape[2:], kernel, strides, dil, upper=auto == "SAME_UPPER")
        elif auto == "VALID":
            pads = (0, 0, 0, 0)
        attrs = dict(kernel=tuple(int(k) for k in kernel), strides=strides, pads=pads, dilations=dil)
        if op == "Conv":
            attrs["group"] = int(at.get("group", 1))
            self.emit("Conv", name, ins[:3], outs[:1], attrs)
        elif op == "MaxPool":
            if len(outs) > 1 and outs[1]:
                raise CompileError("MaxPool's Indices output is not supported", node=name, op=op)
            if at.get("storage_order", 0):
                raise CompileError("MaxPool storage_order=1 is not supported", node=name, op=op)
            attrs["ceil_mode"] = bool(at.get("ceil_mode", 0))
            self.emit("MaxPool", name, ins[:1], outs[:1], attrs)
        else:
            if dil != (1, 1):
                raise CompileError("AveragePool dilations are not supported", node=name, op=op)
            attrs.update(ceil_mode=bool(at.get("ceil_mode", 0)), count_include_pad=bool(at.get("count_include_pad", 0)))
            self.emit("AveragePool", name, ins[:1], outs[:1], attrs)

    # ------------------------------------------------------ quantized forms
    def _scale_zp(self, n, name: str, idx: int) -> tuple[np.ndarray, np.ndarray]:
        scale = self.const_input(n, name, idx, "quantization scale")
        zp = self.const_input(n, name, idx + 1, "zero point")
        zp = np.zeros((), np.uint8) if zp is None else zp
        return np.asarray(scale, np.float32), zp

    def _quant_linear(self, n, name, op, ins, outs, at) -> None:
        scale, zp = self._scale_zp(n, name, 1)
        if scale.size != 1:
            raise CompileError("per-axis quantization of activations is not supported", node=name, op=op)
        attrs = dict(scale=float(scale.reshape(-1)[0]), zero_point=int(zp.reshape(-1)[0]), dtype=zp.dtype.name)
        if op == "QuantizeLinear" and attrs["dtype"] not in ("int8", "uint8"):
            raise CompileError(f"quantizing to {attrs['dtype']} is not supported", node=name, op=op)
        self.emit(op, name, ins[:1], outs[:1], attrs)

    def _dequant_const(self, q: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int) -> np.ndarray:
        shape = [1] * q.ndim
        if scale.size > 1:
            shape[axis] = scale.size
        return ((q.astype(np.float32) - zp.astype(np.float32).reshape(shape if zp.size > 1 else ()))
                * scale.reshape(shape if scale.size > 1 else ())).astype(np.float32)

    def _qlinear(self, n, name: str, kind: str, at: dict) -> None:
        """QLinearConv / QLinearMatMul -> DequantizeLinear, float op, QuantizeLinear."""
        g, ins = self.graph, list(n.input)
        xs, xzp = self._scale_zp(n, name, 1)
        ws, wzp = self._scale_zp(n, name, 4)
        ys, yzp = self._scale_zp(n, name, 6)
        if xs.size != 1 or ys.size != 1:
            raise CompileError("per-axis activation scales are not supported", node=name, op=n.op_type)
        xf = g.fresh_name(f"{name}.x_float")
        self.emit("DequantizeLinear", f"{name}.dequantize", [ins[0]], [xf],
                  dict(scale=float(xs.reshape(-1)[0]), zero_point=int(xzp.reshape(-1)[0]), dtype=xzp.dtype.name))
        w = self.const_input(n, name, 3, "weights")
        wf = g.add_const(f"{name}.weight", self._dequant_const(w, ws, wzp, 0 if kind == "Conv" else 1))
        yf = g.fresh_name(f"{name}.y_float")
        if kind == "Conv":
            bias = self.const_input(n, name, 8, "bias")
            inputs = [xf, wf]
            if bias is not None:
                inputs.append(g.add_const(f"{name}.bias", (bias.astype(np.float64) * xs.reshape(-1)[0]
                                                           * ws.reshape(-1)).astype(np.float32)))
            self._window_op("Conv", f"{name}.conv", inputs, [yf], at)
        else:
            self.emit("MatMul", f"{name}.matmul", [xf, wf], [yf], {})
        self.emit("QuantizeLinear", name, [yf], [n.output[0]],
                  dict(scale=float(ys.reshape(-1)[0]), zero_point=int(yzp.reshape(-1)[0]), dtype=yzp.dtype.name))


def _same_pads(size, kernel, strides, dil, upper: bool) -> tuple[int, int, int, int]:
    lo, hi = [], []
    for s, k, st, d in zip(size, kernel, strides, dil):
        out = ceil_div(s, st)
        total = max((out - 1) * st + d * (k - 1) + 1 - s, 0)
        small, big = total // 2, total - total // 2
        lo.append(small if upper else big)
        hi.append(big if upper else small)
    return (lo[0], lo[1], hi[0], hi[1])


def _reshape_target(shape: tuple[int, ...], target: list[int], allowzero: bool) -> tuple[int, ...]:
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


def import_onnx(source, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """Load, check and convert an ONNX model (path, bytes or ModelProto) into a typed Graph.

    Symbolic input dimensions default to 1 unless `input_shapes` fixes them;
    `graph.notes["defaulted_dims"]` lists which were defaulted so callers can say so."""
    model = load_model(source)
    _check_ops(model)
    imp = _Importer(model, input_shapes)
    graph = imp.run()
    graph.notes.update(defaulted_dims=imp.defaulted, opset=imp.opset)
    return graph
