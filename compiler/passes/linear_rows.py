"""nn.Linear over a sequence: a (..., T, K) @ W (K, N) MatMul by a constant, as torch exports a linear
layer whose input has more than two dimensions, becomes a Dense over the M = prod(...) * T rows.

Only Dense has an int8 form and an accelerator task (a 1x1 convolution over a 1 x M image of the rows,
`backends/vta/runtime.act_nchw`, weights loaded once per output tile for every row); without this, every
projection and MLP of a transformer would stay a float MatMul on the host.  The Reshapes on either
side are free on the host.  The bias torch adds after the product (an Add of a constant that is one
value per output feature, or a scalar) is taken into the Dense, as `fold.fold_into_conv` does for a
2-D one.

A residual add of such a result (`sink_row_reshapes`) is done in the rows form too: the Reshape back to the
sequence moves below the Add, so the residual stream between two linear layers stays one accelerator
tensor (the add can fuse into the dense layer that feeds it) instead of crossing to the host for a
Reshape on each side."""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.passes.fold import channel_vector


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
    return channel_vector(v, features, 2)  # the features are the channels (axis 1) of the (M, N) rows


def flatten_matmul_rows(graph: Graph) -> Graph:
    """`_flatten` then `sink_row_reshapes`."""
    return sink_row_reshapes(_flatten(graph))


def _flatten(graph: Graph) -> Graph:
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


def _rows_source(g: Graph, producers: dict[str, Node], t: str) -> str | None:
    """The 2-D (M, N) tensor `t` is a Reshape of, when that reshape only splits the rows (t is (..., N))."""
    p = producers.get(t)
    if p is None or p.op != "Reshape":
        return None
    src, shape = g.tensors[p.inputs[0]].shape, g.tensors[t].shape
    return p.inputs[0] if len(src) == 2 and len(shape) > 2 and shape[-1] == src[1] else None


def sink_row_reshapes(graph: Graph) -> Graph:
    """Add(Reshape(rows), x) of one shape -> Reshape(Add(rows, Reshape(x))), the add in the (M, N) rows form;
    `simplify` then cancels a Reshape of a Reshape, so a chain of residual adds stays in rows form."""
    g = graph.copy()
    producers = g.producers()
    out: list[Node] = []
    for n in g.nodes:
        shape = g.tensors[n.outputs[0]].shape if n.outputs else ()
        ins = n.inputs
        if not (n.op == "Add" and len(ins) == 2 and not any(g.is_const(i) for i in ins)
                and g.tensors[ins[0]].shape == g.tensors[ins[1]].shape == shape and len(shape) > 2):
            out.append(n)
            continue
        rows = [_rows_source(g, producers, i) for i in ins]
        pick = 0 if rows[0] is not None else 1 if rows[1] is not None else None
        if pick is None:
            out.append(n)
            continue
        flat = g.tensors[rows[pick]].shape
        new_ins = list(ins)
        new_ins[pick] = rows[pick]  # type: ignore[assignment]
        other = ins[1 - pick]
        if rows[1 - pick] is not None and g.tensors[rows[1 - pick]].shape == flat:  # type: ignore[index]
            new_ins[1 - pick] = rows[1 - pick]  # type: ignore[assignment]
        else:
            flat_other = g.fresh_name(f"{other}.rows")
            g.tensors[flat_other] = TensorInfo(flat, g.tensors[other].dtype)
            out.append(Node("Reshape", g.fresh_name(f"{n.name}.to_rows"), [other], [flat_other], dict(shape=flat)))
            new_ins[1 - pick] = flat_other
        summed = g.fresh_name(f"{n.outputs[0]}.rows")
        g.tensors[summed] = TensorInfo(flat, g.tensors[n.outputs[0]].dtype)
        add = Node("Add", n.name, new_ins, [summed], dict(n.attrs))
        back = Node("Reshape", g.fresh_name(f"{n.name}.from_rows"), [summed], [n.outputs[0]], dict(shape=shape))
        out += [add, back]
        producers[summed], producers[n.outputs[0]] = add, back
    g.nodes = out
    g.prune()
    return g
