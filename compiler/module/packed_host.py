"""Host activations on the accelerator's own layout: one crossing, not two.

A host activation between two accelerator layers (a SiLU, a HardSwish: the ALU has no exponential and no
multiplier) would unpack its producer's tile from DRAM into a host tensor, compute, and pack the result
into the next layer's buffer: two crossings, each a layout transform.  An elementwise op computes each
element from the same element of its operands, so it can just as well run on the packed tile itself
(NCHW{batch}n{block}c): the host reads the producer's tile as it lies in DRAM, applies the activation, and
writes the tile for the next layer in the same layout: one crossing.  The values in the real lanes are the
same computations, so the results are bit-identical; the zero padding lanes may take other values, which no
reader sees (a conv's weights are zero there, an elementwise task's padding is dropped when unpacked).

`packed_nodes` finds the host nodes that can run so: elementwise (`ELEMENTWISE`), every activation operand
of the output's shape and made on the same packed layout (by an accelerator task, an int32 accumulator
too, or another such node), every constant operand a scalar or one value per channel (`tile_constant`),
and every reader an accelerator task taking that layout in int8 or another such node (no graph output).
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.passes.fold import channel_vector
from vtakit.compiler.passes.lower import ActBuffer, VtaTask

ELEMENTWISE = frozenset({
    "Abs", "Add", "Clip", "Dequantize", "Div", "Elu", "Erf", "Exp", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu",
    "Mish", "Mul", "Neg", "Quantize", "Relu", "Sigmoid", "Softplus", "Sqrt", "Sub", "Tanh"})
"""Ops that compute each element from the same element of their operands (the packed layout is no matter)."""


def _plain(buf: ActBuffer) -> bool:
    """A buffer a tile can be written to as it is: int8, no host-side reduction packing."""
    return buf.planes == 1 and not buf.packing


def _local(g: Graph, n: Node) -> bool:
    """The node's own conditions: elementwise, one output, activations of the output's shape, constants
    scalar or one value per channel (a per-channel dequantization's factors)."""
    if n.op not in ELEMENTWISE or len(n.outputs) != 1 or n.outputs[0] in g.outputs:
        return False
    shape = g.tensors[n.outputs[0]].shape
    for t in n.inputs:
        if not t:
            continue
        if g.is_const(t):
            v = g.consts[t]
            if v.size != 1 and (len(shape) < 2 or channel_vector(v, shape[1], len(shape)) is None):
                return False  # a scalar or one value per channel only
        elif g.tensors[t].shape != shape:
            return False
    return True


def tile_constant(value: np.ndarray, shape: tuple[int, ...], block: int) -> np.ndarray:
    """A node's constant operand for its packed tiles: a scalar as it is, one value per channel laid out as
    the tiles' channels, (1, C/block, 1, 1, 1, block) (the padding lanes take zeros)."""
    if value.size == 1:
        return value.reshape(())
    channels = shape[1]
    lanes = np.zeros(-(-channels // block) * block, value.dtype)
    lanes[:channels] = value.reshape(-1)
    return lanes.reshape(1, -1, 1, 1, 1, block)


def packed_nodes(g: Graph, tasks: list) -> dict[str, int]:
    """Host node -> the block of the packed layout it runs on, for the nodes that can (module docstring)."""
    made: dict[str, ActBuffer] = {}  # tensor -> the buffer an accelerator task writes it to
    wanted: dict[str, list[ActBuffer]] = {}  # tensor -> the buffers accelerator tasks read it from
    on_accelerator: set[str] = set()
    for t in tasks:
        if isinstance(t, VtaTask):
            on_accelerator.add(t.node)
            made[t.output.tensor] = t.output
            for buf in t.inputs:
                wanted.setdefault(buf.tensor, []).append(buf)
    producer, readers = g.producers(), g.consumers()
    block: dict[str, int] = {}
    for n in (g.node(t) for t in tasks if isinstance(t, str)):  # in run order: operands first
        if _local(g, n):
            blocks = {_operand_block(g, t, made, producer, block) for t in n.inputs if t and not g.is_const(t)}
            if len(blocks) == 1 and None not in blocks:
                block[n.name] = blocks.pop()

    def keeps(n: Node) -> bool:
        b, out = block[n.name], n.outputs[0]
        operands = all(_operand_block(g, t, made, producer, block) == b for t in n.inputs if t and not g.is_const(t))
        takers = readers.get(out, [])
        return operands and bool(takers) and all(
            all(_plain(buf) and buf.block == b for buf in wanted.get(out, [])) if r.name in on_accelerator
            else block.get(r.name) == b for r in takers)

    while dropped := [name for name in block if not keeps(g.node(name))]:  # until every condition holds
        for name in dropped:
            del block[name]
    return block


def _operand_block(g: Graph, t: str, made: dict[str, ActBuffer], producer: dict[str, Node],
                   block: dict[str, int]) -> int | None:
    """The packed layout's block an operand is available in (None: only as a host tensor)."""
    if t in made and not made[t].packing:  # an int32 accumulator (byte planes) is read as int32 tiles
        return made[t].block
    p = producer.get(t)
    return block.get(p.name) if p is not None else None
