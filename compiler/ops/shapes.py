"""Static shape and dtype inference for the graph IR's ops (normalised attributes, see onnx_import).

Each op's rule lives in its registry definition (`ops/`); each returns the TensorInfo
of every output or raises a CompileError naming the node.  Passes call `infer` again after they rewrite a node.
"""

from __future__ import annotations

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops import op_def
from vtakit.compiler.ops.window import pool_out  # noqa: F401  (re-exported)


def infer(node: Node, graph: Graph) -> list[TensorInfo]:
    """Output infos of `node` from its inputs' infos in `graph` (the op's registered shape rule)."""
    return op_def(node.op, node).infer(node, graph)


def infer_graph(graph: Graph) -> None:
    """Fill in (or refresh) the TensorInfo of every node output, in order."""
    for node in graph.nodes:
        for name, info in zip(node.outputs, infer(node, graph)):
            graph.tensors[name] = info
