"""The op registry: everything the network compiler knows about one op, in one definition.

An `OpDef` holds an op's import from ONNX (the ONNX op types and versions it takes,
attribute normalisation), its shape rule, its float host execution (and int8, where
the same function serves both), its precision class, its quantization rule (when it
has an int8 form) and its placement rule (why the accelerator does or does not take
it).  The passes look ops up by name (`op_def`, `onnx_def`) instead of branching on
op names, so adding an op is one definition in one family module (`ops/*.py`).

An ONNX op that no family defines but `onnx.reference` implements gets a generic
definition on first use (`ops/onnx_reference.py`, installed with `set_generic`): correct, slow, float-only host code.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from vtakit.errors import CompileError

if TYPE_CHECKING:  # pragma: no cover
    from vtakit.compiler.ir import Graph, Node, TensorInfo


class Precision(str, Enum):
    """How an op relates to int8 (`quant.precision.precision_plan` applies the rule)."""

    NEUTRAL = "precision-neutral"  # moves or selects values: runs in the precision of its input
    INT8 = "int8-capable"  # computes in int8 (on the accelerator or a host int8 kernel) when its form allows
    FLOAT = "float-only"  # no int8 form: always runs in float on the host


InferFn = Callable[["Node", "Graph"], "list[TensorInfo]"]
RunFn = Callable[["Node", list, Any], Any]
ConvertFn = Callable[[Any, Any, str, dict], None]  # (importer, onnx NodeProto, node name, attributes)
FormFn = Callable[["Graph", "Node"], bool]
PlaceFn = Callable[["Graph", "Node", Any], "str | None"]

KERNELS = ("llvmlite", "numpy", "onnx.reference")
INT8_RULES = ("weights", "sum", "product")
FLOAT32 = ("float32",)
FLOAT32_INT8 = ("float32", "int8")  # what the llvmlite conv, dense and pooling kernels take


@dataclass(frozen=True)
class OpDef:
    """One op: see the module docstring.  `name` is the IR op name; `onnx` the ONNX op types whose
    import (`convert`) this definition owns (an ONNX op may import as another IR op, e.g. Squeeze as
    Reshape); `precision` None marks the quantizer's own ops (QConv, Quantize, ...), which no ONNX
    model names."""

    name: str
    infer: InferFn
    run: RunFn
    precision: Precision | None = Precision.FLOAT
    onnx: tuple[str, ...] = ()
    convert: ConvertFn | None = None
    versions: tuple[int, ...] = ()  # ONNX op versions whose semantics `convert` normalises
    int8_form: FormFn | None = None  # whether the node can compute in int8 here (default: by precision class)
    int8_op: str | None = None  # the quantizer's op for its int8 form, when that form rescales (QConv, QAdd)
    int8_rule: str | None = None  # how: "weights" (x * constant w + b, then a shift; folds batch norm and
    # scales into w), "sum" (operands brought to one scale) or "product" (two activations multiplied: the
    # exponents add); each carries a fused activation's clip
    accel: PlaceFn | None = None  # None when the accelerator takes the (quantized) node, else why not
    lower: Callable[..., Any] | None = None  # (graph, node, cfg, schedule) -> backends/vta/graph_ops.AccelProgram
    kernel: str = "llvmlite"  # what runs it on the host: llvmlite kernels, numpy, or onnx.reference
    doc: str = ""
    dtypes: tuple[str, ...] = ()  # element types its host kernels read (empty: any native one); a node
    # reading another type (a float16 MatMul, a uint8 MaxPool) imports generically (onnx.reference)


OPS: dict[str, OpDef] = {}
"""IR op name -> definition."""
IMPORTS: dict[str, OpDef] = {}
"""ONNX op type -> the definition whose `convert` imports it."""
ONNX_PRECISION: dict[str, Precision] = {}
"""ONNX op type -> the precision class of what it imports as."""


_generic: Callable[[str], "OpDef | None"] | None = None
"""The fallback for ops no family defines (`ops/onnx_reference.py` installs it with `set_generic`)."""


def set_generic(make: Callable[[str], "OpDef | None"]) -> None:
    """Install the definition maker for ops that no family defines (an op name -> OpDef or None)."""
    global _generic
    _generic = make


def register(d: OpDef, onnx_precision: dict[str, Precision] | None = None) -> OpDef:
    """Add a definition (each IR name and ONNX op type once)."""
    if d.name in OPS:
        raise ValueError(f"op {d.name!r} is registered twice")
    if d.kernel not in KERNELS:
        raise ValueError(f"op {d.name!r}: unknown kernel kind {d.kernel!r}")
    if (d.int8_rule is None) != (d.int8_op is None) or (d.int8_rule and d.int8_rule not in INT8_RULES):
        raise ValueError(f"op {d.name!r}: int8_op and int8_rule ({', '.join(INT8_RULES)}) go together")
    OPS[d.name] = d
    for onnx_op in d.onnx:
        if onnx_op in IMPORTS:
            raise ValueError(f"ONNX op {onnx_op!r} is imported by two definitions")
        IMPORTS[onnx_op] = d
        cls = (onnx_precision or {}).get(onnx_op, d.precision)
        if cls is not None:
            ONNX_PRECISION[onnx_op] = cls
    return d


def accelerate(name: str, place: PlaceFn, lower: Callable[..., Any]) -> OpDef:
    """Attach an accelerator backend's placement and lowering rules to a registered op (the backend
    imports the registry, never the other way round)."""
    old = OPS.get(name)
    if old is None:
        raise ValueError(f"op {name!r} is not registered")
    if old.accel is not None or old.lower is not None:
        raise ValueError(f"op {name!r} already has accelerator rules")
    new = replace(old, accel=place, lower=lower)
    OPS[name] = new
    for onnx_op, d in IMPORTS.items():
        if d is old:
            IMPORTS[onnx_op] = new
    return new


def op_def(name: str, node: "Node | None" = None) -> OpDef:
    """The definition of an IR op; an ONNX op known only to onnx.reference gets its generic one."""
    d = OPS.get(name)
    if d is None and _generic is not None:
        d = _generic(name)
    if d is None:
        raise CompileError("no definition for this op", node=node.name if node else None, op=name)
    return d


def onnx_def(op_type: str) -> OpDef | None:
    """The definition importing an ONNX op type, or None when neither a family nor onnx.reference has it."""
    d = IMPORTS.get(op_type)
    if d is None and _generic is not None:
        d = _generic(op_type)
    return d


def int8_rule(op: str) -> str | None:
    """An op's rescaling int8 rule (`OpDef.int8_rule`): "weights", "sum" or None."""
    d = OPS.get(op)
    return d.int8_rule if d is not None else None


def precision_of(op: str) -> Precision:
    """An op's precision class (IR or ONNX name); unknown ops are float-only."""
    d = OPS.get(op)
    if d is not None and d.precision is not None:
        return d.precision
    return ONNX_PRECISION.get(op, Precision.FLOAT)


def keeps_scale(op: str) -> bool:
    """Whether an op's int8 output keeps its input's scale: the precision-neutral ops (read live, so an op
    registered after the compiler was imported counts too)."""
    return precision_of(op) is Precision.NEUTRAL


# ------------------------------------------------------------------ shared helpers for the families
def fail(node: "Node", msg: str) -> CompileError:
    return CompileError(msg, node=node.name, op=node.op)


def broadcast(node: "Node", a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise fail(node, f"shapes {a} and {b} do not broadcast") from None


def inputs_of(node: "Node", graph: "Graph") -> list:
    return [graph.tensors[i] if i else None for i in node.inputs]


def same(node: "Node", graph: "Graph") -> list:
    """Shape rule of ops whose output is like their first input."""
    return [graph.tensors[node.inputs[0]]]


def contiguous(v) -> np.ndarray:
    """A C-contiguous array that keeps rank 0 (np.ascontiguousarray makes scalars 1-D)."""
    v = np.asarray(v)
    return v if v.flags.c_contiguous else v.copy(order="C")


def text(v, default: str = "") -> str:
    """An ONNX string attribute (bytes) as str."""
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def auto_pad(at: dict) -> str:
    """A window op's `auto_pad`, one of ONNX's four values (onnxruntime refuses any other, and so do we)."""
    value = text(at.get("auto_pad"), "NOTSET")
    if value not in AUTO_PADS:
        raise ValueError(f"auto_pad {value[:40]!r} is not one of {', '.join(AUTO_PADS)}")
    return value

