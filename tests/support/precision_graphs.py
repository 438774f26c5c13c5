"""Random small graphs for the precision rule's property tests, and the rule's checks.

`networks()` draws ONNX graphs of accelerator ops (Conv, Relu, Gemm, Add, MaxPool), float host ops
(Softmax, AveragePool, GlobalAveragePool, Mul) and precision-neutral ops (Identity, Flatten, Reshape,
Transpose, Squeeze, Unsqueeze, Dropout, Concat, Pad), with branches and several outputs;
`check_precision_rule(model)` quantizes one and asserts the rule (tests/unit/compiler/quant/
test_precision_property.py states it).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from vtakit.compiler.frontend.onnx_import import PRECISION, Precision, import_onnx
from vtakit.compiler.ir import Graph
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.pipeline import optimize
from vtakit.compiler.ops import keeps_scale
from vtakit.compiler.quant.quantize import calibrate, quantize

C, HW, K = 4, 4, 8  # channels, image side, dense width: few shapes, so the host kernels' JIT cache hits
INT8_COMPUTE = ("QConv", "QDense", "QAdd")
OPS_4D = ("Conv", "Relu", "MaxPool", "Add", "Softmax", "AveragePool", "GlobalAveragePool", "Mul", "Identity",
          "Flatten", "Reshape", "Transpose", "Squeeze", "Dropout", "Concat", "Pad")
OPS_2D = ("Gemm", "Relu", "Add", "Softmax", "Mul", "Identity", "Transpose", "Unsqueeze", "Dropout", "Concat")


class RandomNet:
    """An ONNX graph grown one node at a time from drawn choices, tracking each tensor's shape."""

    def __init__(self) -> None:
        self.nodes, self.inits = [], []
        self.shapes: dict[str, tuple[int, ...]] = {"x": (1, C, HW, HW)}
        self.rng = np.random.default_rng(0)

    def const(self, value: np.ndarray) -> str:
        name = f"k{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op.lower()}{len(self.nodes)}", **attrs))
        self.shapes[out] = shape
        return out

    def grow(self, op: str, x: str, other: str | None) -> str:  # noqa: C901 - one case per op
        s = self.shapes[x]
        w = lambda *shape: self.const((self.rng.standard_normal(shape) * 0.4).astype(np.float32))  # noqa: E731
        if op == "Conv":
            return self.add("Conv", [x, w(C, s[1], 3, 3), w(C)], (1, C) + s[2:], pads=[1, 1, 1, 1])
        if op == "Gemm":
            return self.add("Gemm", [x, w(s[1], K), w(K)], (1, K))
        if op in ("Relu", "Identity", "Dropout", "Softmax"):
            return self.add(op, [x], s)
        if op == "MaxPool":
            return self.add("MaxPool", [x], s, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        if op == "AveragePool":
            return self.add("AveragePool", [x], s, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        if op == "GlobalAveragePool":
            return self.add("GlobalAveragePool", [x], s[:2] + (1, 1))
        if op in ("Add", "Concat"):
            other = other if other is not None and self.shapes[other] == s else x
            if op == "Add":
                return self.add("Add", [x, other], s)
            return self.add("Concat", [x, other], (s[0], 2 * s[1]) + s[2:], axis=1)
        if op == "Mul":
            return self.add("Mul", [x, other if other is not None and self.shapes[other] == s else x], s)
        if op == "Flatten":
            return self.add("Flatten", [x], (1, int(np.prod(s[1:]))), axis=1)
        if op == "Reshape":  # NCHW -> N,C,1,HW and back to a square
            return self.add("Reshape", [x, self.const(np.array(s[:2] + (s[2] * s[3], 1), np.int64))],
                            s[:2] + (s[2] * s[3], 1)) if s[3] != 1 else \
                self.add("Reshape", [x, self.const(np.array(s[:2] + (1, s[2]), np.int64))], s[:2] + (1, s[2]))
        if op == "Transpose":
            perm = [0, 1, 3, 2] if len(s) == 4 else [1, 0]
            return self.add("Transpose", [x], tuple(s[p] for p in perm), perm=perm)
        if op == "Squeeze":  # (1, C, 1, 1) -> (1, C); elsewhere the Identity it would be
            if s[2:] != (1, 1):
                return self.grow("Identity", x, other)
            return self.add("Squeeze", [x, self.const(np.array([2, 3], np.int64))], s[:2])
        if op == "Unsqueeze":
            return self.add("Unsqueeze", [x, self.const(np.array([2, 3], np.int64))], s + (1, 1))
        if op == "Pad":
            return self.add("Pad", [x, self.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))],
                            s[:2] + (s[2] + 2, s[3] + 2))
        raise AssertionError(op)

    def model(self, outputs: list[str]):
        vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, list(self.shapes[n]))  # noqa: E731
        graph = helper.make_graph(self.nodes, "random", [vi("x")], [vi(o) for o in outputs], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _growable(s: tuple[int, ...]) -> bool:
    """Batch 1, and images small enough that the graph stays cheap."""
    return s[0] == 1 and (len(s) == 2 or (s[1] <= 2 * C and s[2] * s[3] <= (HW + 2) ** 2))


@st.composite
def networks(draw):
    """A random graph of 2 to 9 grown nodes, its last tensor and up to two others as outputs."""
    net = RandomNet()
    tensors = ["x"]
    for _ in range(draw(st.integers(2, 9))):
        x = tensors[-1] if draw(st.booleans()) else draw(st.sampled_from(tensors))
        if not _growable(net.shapes[x]):
            x = tensors[-1]
        if not _growable(net.shapes[x]):
            break  # a transposed 2-D or an overgrown 4-D tensor: the graph ends here
        op = draw(st.sampled_from(OPS_4D if len(net.shapes[x]) == 4 else OPS_2D))
        other = draw(st.sampled_from(tensors))
        tensors.append(net.grow(op, x, other))
    made = tensors[1:] or [net.grow("Softmax", "x", None)]
    extra = draw(st.lists(st.sampled_from(made), max_size=2, unique=True))
    return net.model(list(dict.fromkeys([made[-1]] + extra)))


def _walk_back(g: Graph, t: str, through) -> list:
    """The producers reached from t going back through nodes `through` accepts (not included)."""
    prod, roots, todo, seen = g.producers(), [], [t], set()
    while todo:
        n = prod.get(todo.pop())
        if n is None or n.name in seen:
            continue
        seen.add(n.name)
        if through(n):
            todo.extend(i for i in n.inputs if i and not g.is_const(i))
        else:
            roots.append(n)
    return roots


def check_precision_rule(model) -> None:
    """Quantize `model` (calibrated on two seeded inputs) and assert the precision rule on the result."""
    f = optimize(import_onnx(model))
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, C, HW, HW)).astype(np.float32)} for _ in range(2)]
    q = quantize(f, calibrate(f, samples))
    neutral_int8 = lambda n: keeps_scale(n.op) and q.tensors[n.outputs[0]].dtype == "int8"  # noqa: E731
    users = q.consumers()
    for n in q.nodes:
        if n.op == "Dequantize":
            roots = _walk_back(q, n.inputs[0], neutral_int8)
            assert all(r.op != "Quantize" for r in roots), f"round trip ending in {n}: {q.nodes}"
        if n.op == "Quantize":
            todo = [n.outputs[0]]
            while todo:
                t = todo.pop()
                assert t not in q.outputs, f"{t} quantized for a graph output: {q.nodes}"
                for u in users.get(t, []):
                    assert u.op in INT8_COMPUTE or neutral_int8(u), f"{n} feeds {u}: {q.nodes}"
                    if u.op not in INT8_COMPUTE:
                        todo.append(u.outputs[0])
    q_prod = q.producers()
    for o in f.outputs:
        roots = _walk_back(f, o, lambda n: PRECISION.get(n.op) is Precision.NEUTRAL)
        if all(PRECISION.get(r.op, Precision.FLOAT) is Precision.FLOAT for r in roots):  # graph inputs: no root
            assert q.tensors[o].dtype == "float32" and q_prod[o].op != "Dequantize", (o, q.nodes)
        assert q.tensors[o].dtype == "float32"
    outs = run_graph(q, samples[0])
    assert all(np.isfinite(v).all() for v in outs.values())
