"""Where a tensor becomes int8 (the precision rule).  Every op declares a class in
its registry definition (`ops/`; `ops.precision_of` reads it live, `onnx_import.PRECISION` tables it): int8-capable (Conv, Dense, same-shape Add),
precision-neutral (Identity, Flatten, Reshape, Transpose, Squeeze/Unsqueeze,
Dropout, Concat, Pad, Relu, Clip, MaxPool) or float-only (Softmax, average
pooling, Mul, ...).  `precision_plan` applies it:

- an int8-capable op whose form allows it (constant weights, same-shape add)
  computes in int8, and only there are float tensors quantized: a tensor is
  quantized only where an int8 consumer needs it;
- a precision-neutral op takes the precision of its input: int8 when every
  input is int8, else float (int8 inputs beside a float one are dequantized,
  which is exact; a float input is never quantized for it).  One case moves a
  Quantize without adding one: when every reader of its output computes in
  int8 and it is no graph output, the Quantize those readers need anyway goes
  above it, so it runs on int8 (on the accelerator, for relu and max pooling);
- a float-only op runs in float, reading int8 tensors through a Dequantize;
- a conv/dense (or a product of two activations) with no fused activation and no reader that computes
  in int8 keeps its int32 accumulator, dequantized exactly, unless its output is a sequence of rows
  (`_token_rows`: a transformer's tokens), which leaves in int8.

So no Quantize -> Dequantize round trip appears between float ops, and a graph
output reached through precision-neutral ops from a float op is float; one
reached from an int8 op is that op's dequantized int8 (or int32) value.

Precision also follows placement: a node the host runs stays float (`keep_float`, set by the pipeline's
precision step from `passes.partition.host_bound`, by the user, or by `keep_out_of_reach` for a tensor no
int8 scale holds, such as an additive attention mask).
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import CompileError
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.ops import Precision, int8_rule, op_def, precision_of


def keep_nodes_float(g: Graph, names, uncorrected: Graph | None = None) -> Graph:
    """Mark nodes that must stay float on the host (`keep_float`); unknown names are an error.

    `uncorrected`: the graph before bias correction; a kept node takes its bias back from there
    (the correction offsets int8 weight error, which a float node does not have)."""
    names = tuple(names or ())
    if not names:
        return g
    known = {n.name for n in g.nodes}
    missing = [n for n in names if n not in known]
    if missing:
        raise CompileError(f"keep_float names no node of the optimized graph: {', '.join(missing[:4])}")
    g = g.copy()
    before = {n.name: n for n in uncorrected.nodes} if uncorrected is not None else {}
    for n in g.nodes:
        if n.name in names:
            n.attrs["keep_float"] = True
            o = before.get(n.name)
            if o is not None and o.op == n.op and o.inputs[:2] == n.inputs[:2] and o.inputs[2:] != n.inputs[2:]:
                n.inputs = list(o.inputs)
                for t in o.inputs[2:]:
                    if t in uncorrected.consts:
                        g.consts[t], g.tensors[t] = uncorrected.consts[t], uncorrected.tensors[t]
    return g


OUT_OF_REACH = "its values are beyond any int8 scale on the calibration samples (an additive mask?)"


def keep_out_of_reach(g: Graph, tensors: set[str]) -> Graph:
    """Mark float every int8-capable or precision-neutral node that reads or makes one of `tensors` (beyond
    int8's reach, `unrepresentable`): an attention mask of -1e9 or -inf, and the add applying it, stay float
    exactly, and no exponent is asked of them."""
    if not tensors:
        return g
    g = g.copy()
    for n in g.nodes:
        if (precision_of(n.op) in (Precision.INT8, Precision.NEUTRAL) and not n.attrs.get("keep_float")
                and any(t in tensors for t in (*n.inputs, *n.outputs))):
            n.attrs["keep_float"] = OUT_OF_REACH
    return g


def _int8_form(g: Graph, n: Node) -> bool:
    """Whether the node could run on int8 data here: its registry definition's rule (`OpDef.int8_form`),
    by default a precision-neutral op reading only activations."""
    if n.attrs.get("keep_float"):  # compile_module(keep_float=...): the user keeps it on the host in float
        return False
    d = op_def(n.op, n)
    if d.int8_form is not None:
        return d.int8_form(g, n)
    return precision_of(n.op) is Precision.NEUTRAL and all(not g.is_const(i) for i in n.inputs if i)


@dataclass(frozen=True)
class PrecisionPlan:
    """The precision rule applied to one graph (see the module docstring)."""

    int8: frozenset[str]  # nodes that compute in int8
    wide: frozenset[str]  # conv/dense nodes among them that keep their int32 accumulator


def _token_rows(g: Graph, tensor: str) -> bool:
    """A dense layer's output over several rows (a transformer's tokens) leaves in int8 even for a float
    reader: as int32 it would leave as four byte planes, most of the layer's time over a sequence (DeiT-tiny
    11.1 M -> 7.9 M cycles, logits cosine 0.995 either way).  Per-token logits too: keeping a 50,257-word LM
    head's int32 cost GPT-2 (2 layers) 68 -> 56 % of peak for the same top-1 and cosine.  A one-row output (a
    classifier's logits) keeps its int32 accumulator."""
    shape = g.tensors[tensor].shape
    return len(shape) == 2 and shape[0] > 1


def precision_plan(g: Graph) -> PrecisionPlan:
    """Which nodes compute in int8: int8-capable ops with an int8 form, and precision-neutral ops
    whose inputs are all int8 or whose readers all compute in int8 (never a graph output)."""
    users = g.consumers()
    form = {n.name: _int8_form(g, n) for n in g.nodes}
    needs: dict[str, bool] = {}  # node -> it reads its activations as int8, whatever their producer
    for n in reversed(g.nodes):
        if not form[n.name]:
            needs[n.name] = False
        elif precision_of(n.op) is Precision.INT8:
            needs[n.name] = True
        else:
            readers = users.get(n.outputs[0], [])
            needs[n.name] = bool(readers) and n.outputs[0] not in g.outputs and all(needs[r.name] for r in readers)
    int8, wide, int8_tensors = set(), set(), set()
    for n in g.nodes:
        if not form[n.name]:
            continue
        acts = [i for i in n.inputs if i and not g.is_const(i)]
        if precision_of(n.op) is Precision.NEUTRAL and not needs[n.name] and not all(i in int8_tensors for i in acts):
            continue
        int8.add(n.name)
        out = n.outputs[0]
        if int8_rule(n.op) in ("weights", "product") and "act" not in n.attrs and not _token_rows(g, out) \
                and not any(needs[r.name] for r in users.get(out, [])):
            wide.add(n.name)
        else:
            int8_tensors.add(out)
    return PrecisionPlan(frozenset(int8), frozenset(wide))


VECTOR_ISLAND = ("a convolution of one vector between float host nodes (a squeeze-excite): on the accelerator "
                 "it would cost two crossings and buy one matrix-vector product")


def _vector(g: Graph, tensor: str) -> bool:
    """A tensor with at most one dimension over 1: one vector (a pooled (1, C, 1, 1) descriptor)."""
    return sum(d != 1 for d in g.tensors[tensor].shape) <= 1


def keep_vector_islands_float(g: Graph) -> Graph:
    """Precision follows placement for squeeze-excite blocks: convolutions of a single vector (a pooled
    (1, C, 1, 1) descriptor), alone or in a chain through precision-neutral ops, whose activations come from
    float host nodes and go only to float host nodes, stay float on the host (`keep_float`, VECTOR_ISLAND).
    In int8 each such conv costs a crossing in and out for a matrix-vector product, and its few rounded
    values gate whole feature maps (PP-OCR's direction classifier: 43 -> 25 crossings, cosine 0.941 ->
    0.952).  A conv reading a graph input or making a graph output is left alone, and so is a dense layer
    (a classifier head: the light zoo's programs stay as they were)."""
    made_by, users = g.producers(), g.consumers()

    def host_float(n: Node | None) -> bool:
        return n is not None and (bool(n.attrs.get("keep_float")) or precision_of(n.op) is Precision.FLOAT)

    island = {n.name: n for n in g.nodes
              if not n.attrs.get("keep_float") and n.outputs and n.outputs[0] not in g.outputs
              and _vector(g, n.outputs[0])
              and ((n.op == "Conv" and len(n.inputs) > 1 and g.is_const(n.inputs[1]))
                   or precision_of(n.op) is Precision.NEUTRAL)}
    changed = True
    while changed:  # drop members with a neighbour outside the island that is not a float host node
        changed = False
        for name, n in list(island.items()):
            sources = [made_by.get(i) for i in n.inputs if i and not g.is_const(i)]
            inside = all(host_float(p) or (p is not None and p.name in island) for p in sources)
            readers = users.get(n.outputs[0], [])
            if not (sources and inside and readers and all(host_float(r) or r.name in island for r in readers)):
                del island[name]
                changed = True
    convs = [n for n in island.values() if n.op == "Conv"]
    if not convs:
        return g
    g = g.copy()
    for n in g.nodes:
        if n.name in island and n.op == "Conv":
            n.attrs["keep_float"] = VECTOR_ISLAND
    return g
