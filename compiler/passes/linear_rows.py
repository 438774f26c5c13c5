"""nn.Linear over a sequence: a (..., T, K) @ W (K, N) MatMul by a constant, as torch exports a linear
layer whose input has more than two dimensions, becomes a Dense over the M = prod(...) * T rows.

Only Dense has an int8 form and an accelerator task (a 1x1 convolution over a 1 x M image of the rows,
`backends/vta/runtime.act_nchw`, weights loaded once per output tile for every row); without this, every
projection and MLP of a transformer would stay a float MatMul on the host.  The Reshapes on either
side are free on the host.  The bias torch adds after the product (an Add of a constant that is one
value per output feature, or a scalar) is taken into the Dense, as `fold.fold_into_conv` does for a
2-D one."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node, TensorInfo


def _feature_bias(g: Graph, add: Node, product: str, features: int) -> np.ndarray | None:
    """The (N,) bias of an Add(product, constant) when the constant adds one value per output feature."""
    if add.op != "Add" or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] == product else add.inputs[0]
    if other == product or other not in g.consts:
        return None
    v = g.consts[other].astype(np.float64)
    if v.ndim > len(g.tensors[product].shape):
        return None  # the sum would gain dimensions: not a bias
    if v.size == 1:
        return np.full(features, float(v.reshape(-1)[0]))
    if v.shape[-1] == features and v.size == features:
        return v.reshape(-1)
    return None


def flatten_matmul_rows(graph: Graph) -> Graph:
    """Every float MatMul of a rank >= 3 activation by a 2-D constant as Reshape -> Dense -> Reshape."""
    g = graph.copy()
    users = g.consumers()
    out: list[Node] = []
    absorbed: set[int] = set()
    for n in g.nodes:
        if id(n) in absorbed:
            continue
        x = g.tensors.get(n.inputs[0]) if n.inputs else None
        if not (n.op == "MatMul" and x is not None and len(x.shape) >= 3 and x.dtype == "float32"
                and g.is_const(n.inputs[1]) and g.consts[n.inputs[1]].ndim == 2
                and n.inputs[0] not in g.consts):
            out.append(n)
            continue
        w = g.consts[n.inputs[1]].astype(np.float64)  # (K, N)
        k, features = w.shape
        rows = int(np.prod(x.shape[:-1], dtype=np.int64))
        bias, result = np.zeros(features), n.outputs[0]
        readers = users.get(result, [])
        if len(readers) == 1 and result not in g.outputs:
            b = _feature_bias(g, readers[0], result, features)
            if b is not None and g.tensors[readers[0].outputs[0]].shape == g.tensors[result].shape:
                bias, result = b, readers[0].outputs[0]
                absorbed.add(id(readers[0]))
        flat_in = g.fresh_name(f"{n.name}.rows")
        g.tensors[flat_in] = TensorInfo((rows, k), "float32")
        flat_out = g.fresh_name(f"{n.name}.dense")
        g.tensors[flat_out] = TensorInfo((rows, features), "float32")
        out.append(Node("Reshape", g.fresh_name(f"{n.name}.to_rows"), [n.inputs[0]], [flat_in],
                        dict(shape=(rows, k))))
        weight = g.add_const(f"{n.name}.weight", w.T.astype(np.float32))
        bias_name = g.add_const(f"{n.name}.bias", bias.astype(np.float32))
        out.append(Node("Dense", n.name, [flat_in, weight, bias_name], [flat_out], {}))
        out.append(Node("Reshape", g.fresh_name(f"{n.name}.from_rows"), [flat_out], [result],
                        dict(shape=tuple(g.tensors[result].shape))))
    g.nodes = out
    g.prune()
    return g
