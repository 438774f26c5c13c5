"""Caps on what an ONNX model can make the compiler allocate.

A 190-byte model can declare a terabyte input, fold an `Expand` into gigabytes, or point an
initializer at a 1 GB sparse file; each would be allocated before anything noticed.  Every tensor
the import materialises or declares (inputs, initializers, external data, folded constants, the
inferred output of every node) is checked against `LIMITS` first, and refused in one CompileError
line naming it and its size.  The defaults pass every real model the compiler targets; raise them
with `set_limits` / `use_limits` or the CLI's `--max-tensor-mb` / `--max-model-mb`.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Iterator

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.ir import Node
from vtakit.compiler.ops.onnx_reference import GENERIC, static_shape_inference

MB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """tensor_bytes: one tensor, counted at no less than 4 bytes per element (the compiler calibrates
    and executes in float32 or wider, whatever the stored type); model_bytes: what one model may make
    the compiler hold: the .onnx file and its external data, then every constant (initializers, folded
    constants) and every activation (inputs, node outputs) of one inference, counted as for tensor_bytes."""

    tensor_bytes: int = 512 << 20  # the largest real tensor we know: VGG-16's fc6 weight, 392 MiB
    model_bytes: int = 1 << 30     # twice a PYNQ-Z1's DRAM; folding holds copies, so this keeps a compile in 4 GiB

    def __post_init__(self) -> None:
        for name in ("tensor_bytes", "model_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise CompileError(f"limit {name} must be a positive number of bytes, got {getattr(self, name)!r}")


LIMITS = Limits()
"""The limits in force (module-level: `set_limits` replaces it, `use_limits` for a block)."""


def set_limits(tensor_mb: float | None = None, model_mb: float | None = None) -> Limits:
    """Replace the limits in force (None keeps one); returns the previous ones."""
    global LIMITS
    old = LIMITS
    changes = {}
    for field, flag, mb in (("tensor_bytes", "--max-tensor-mb", tensor_mb), ("model_bytes", "--max-model-mb", model_mb)):
        if mb is None:
            continue
        if not math.isfinite(mb) or mb * MB < 1:
            raise CompileError(f"{flag} must be a positive number of MiB, got {mb!r}")
        changes[field] = int(mb * MB)
    LIMITS = replace(LIMITS, **changes)
    return old


@contextmanager
def use_limits(tensor_mb: float | None = None, model_mb: float | None = None) -> Iterator[Limits]:
    """`set_limits` for the duration of a block."""
    global LIMITS
    old = set_limits(tensor_mb, model_mb)
    try:
        yield LIMITS
    finally:
        LIMITS = old


def human(nbytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MB), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} bytes"


@lru_cache(maxsize=None)
def _itemsize(dtype: str) -> int:
    try:
        return max(np.dtype(dtype).itemsize, 1)
    except TypeError:  # an ml_dtypes name numpy does not know by name (bfloat16, float8...)
        return 1


def tensor_cost(shape, dtype) -> tuple[int, int]:
    """(elements, bytes counted against the limit) of a tensor of `shape` and `dtype`."""
    elements = 1
    for d in shape:
        elements *= int(d)
    return elements, elements * max(_itemsize(str(dtype)), 4)


MAX_RANK = 32
"""numpy's limit on an array's dimensions."""


def check_tensor(what: str, shape, dtype, *, node: str | None = None, op: str | None = None) -> None:
    """Refuse a tensor (`what` names it: "input 'x'", "output 'y'") bigger than LIMITS.tensor_bytes,
    before anything allocates it."""
    if len(shape) > MAX_RANK:
        raise CompileError(f"{what} has {len(shape)} dimensions (numpy, and so the compiler, takes at most "
                           f"{MAX_RANK})", node=node, op=op)
    elements, cost = tensor_cost(shape, dtype)
    if cost <= LIMITS.tensor_bytes and min(shape, default=0) >= 0:
        return
    if any(int(d) < 0 for d in shape):
        raise CompileError(f"{what} has a negative dimension {tuple(int(d) for d in shape)}", node=node, op=op)
    if cost > LIMITS.tensor_bytes:
        raise CompileError(f"{what} of shape {tuple(int(d) for d in shape)} ({elements:,} elements of {dtype}, "
                           f"{human(cost)}) exceeds the {human(LIMITS.tensor_bytes)} limit per tensor (raise it with "
                           f"--max-tensor-mb)", node=node, op=op)


class Budget:
    """The running total of a model's bytes against LIMITS.model_bytes."""

    def __init__(self, used: int = 0):
        self.used = used

    def take(self, nbytes: int, what: str, *, node: str | None = None, op: str | None = None) -> None:
        self.check(nbytes, what, node=node, op=op)
        self.used += int(nbytes)

    def check(self, nbytes: int, what: str, *, node: str | None = None, op: str | None = None) -> None:
        """Refuse `nbytes` more, before they are allocated, if they would pass the model's limit."""
        if self.used + int(nbytes) > LIMITS.model_bytes:
            raise CompileError(f"{what} ({human(int(nbytes))}) brings the model's tensors to "
                               f"{human(self.used + int(nbytes))}, over the {human(LIMITS.model_bytes)} limit per "
                               f"model (raise it with --max-model-mb)", node=node, op=op)


def check_live_activations(graph, budget: Budget) -> None:
    """Refuse a graph whose activations alive at once (the host interpreter frees each after its last
    reader), with the constants and inputs `budget` holds, would pass the model's limit: the sum of all
    activations would refuse real detectors (PP-OCR's at 960 x 960 makes 1.5 GiB of them, 0.2 live)."""
    last_read: dict[str, int] = {}
    for i, n in enumerate(graph.nodes):
        for t in n.inputs:
            last_read[t] = i
    held = set(graph.consts) | set(graph.inputs)  # already in `budget`
    kept = held | set(graph.outputs)               # never freed

    def cost(t: str) -> int:
        info = graph.tensors[t]
        return tensor_cost(info.shape, info.dtype)[1]

    live = 0
    for i, n in enumerate(graph.nodes):
        live += sum(cost(out) for out in n.outputs if out and out not in held)
        budget.check(live, "the activations alive after this node", node=n.name, op=n.op)
        live -= sum(cost(t) for t in set(n.inputs) if t and last_read[t] == i and t not in kept)


SIZE_KEEPING = frozenset({
    "Identity", "Cast", "CastLike", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Concat",
    "Split", "Neg", "Abs", "Floor", "Ceil", "Round", "Sqrt", "Exp", "Log", "Relu", "Sign", "Not", "Reciprocal",
    "ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceMean", "ArgMax", "ArgMin", "Shape", "Size"})
"""Ops whose output holds no more elements than their inputs together: folded without a shape check."""
BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Min", "Max", "Sum", "Mean", "Where", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
"""Ops whose output shape is their inputs' broadcast shape ((n, 1) + (1, n) holds n * n)."""


def check_fold(n, name: str, attrs: list, graph, opset: int, budget: Budget | None = None) -> None:
    """Refuse to fold (evaluate at import) a node whose output would pass the limits: Expand, Tile,
    ConstantOfShape, Range, Pad, a broadcast... turn a few bytes into gigabytes.  The output shape
    comes from the inputs' shapes, or onnx's shape inference on the constant inputs, before any
    evaluation; the result is checked again once computed."""
    op = n.op_type
    ins = [graph.consts[i] for i in n.input if i]

    def check(what: str, shape, dtype) -> None:
        check_tensor(what, shape, dtype, node=name, op=op)
        if budget is not None:
            budget.check(tensor_cost(shape, dtype)[1], what, node=name, op=op)

    if op in SIZE_KEEPING:  # a Concat of one tensor a thousand times still adds up
        total = sum(a.size for a in ins)
        check(f"output {n.output[0]!r}", (total,), ins[0].dtype.name if ins else "float32")
        return
    if op in BROADCASTING:
        try:
            shape = np.broadcast_shapes(*(a.shape for a in ins))
        except ValueError:
            return  # evaluation names the mismatch
        widest = max((a.dtype for a in ins), key=lambda d: d.itemsize, default=np.dtype("float32"))
        check(f"output {n.output[0]!r}", shape, widest.name)
        return
    outs = list(n.output)
    for idx, out in enumerate(outs):
        if out:
            node = Node(op + GENERIC, name, list(n.input), [out], dict(onnx=attrs, opset=opset, out=idx, n_out=len(outs)))
            info = static_shape_inference(node, graph)
            if info is not None:
                check(f"output {out!r}", info.shape, info.dtype)
