"""Wider accumulator-side precision for residual adds: a conv whose only reader is a same-shape add keeps
k extra bits instead of requantizing to int8 first.

Today's pair requantizes twice: y = clip((acc + bias') >> s1) at the add's input exponent, then
out = clip((y + skip) >> s2).  When the accelerator fuses the two (passes/fusion.py) y never leaves the
accumulator, so its int8 rounding and clip only lose.  The wide pair computes

    y   = (acc + bias') >> (s1 - k)                    int32, no clip: the conv's "wide" output
    out = clip((y + (skip << k)) >> (s2 + k))           the add's `left` = the skip's left shift

and its conv output takes no part in the add's exponent group (only the skip and the sum are int8).
bias' carries half a step of the final shift s2 + k (so the sum rounds to nearest, where the int8
pair's QAdd rounds down: a bias that a centred classifier reads as a signal) and, for power-of-two
shifts, half a step of s1 - k (y rounds to nearest too); with multipliers (fixed_point.py) n[c]
shrinks by k and the k finer bits of y round down (at most 2**-(k+1) of an output step).

k is bounded three ways: k <= the shift it replaces (no left shift), the sum cannot wrap int32 for any
input (the exact accumulator bound of fixed_point.py: 128 * sum|w_q[c]| + |bias'[c]|), and the
configuration's limit, `WIDE_NOTE`, which `mark` sets where the config is known: without
LOAD.ACC8 the skip reaches the accumulator by an identity GEMM (lowering/move.py) whose diagonal
becomes 2**k for free (int8 weights: k <= IDENTITY_BITS); configurations with LOAD.ACC8 add it with an
ALU ADD, which has no free scale, so they keep today's pair (limit 0, no note: the same).

Unfused pairs stay correct: the host runs both ops (an int32 QConv output, an int32 + int8 QAdd), and
the accelerator never stores the int32 result: the placement rules keep an unfused wide conv and its
add on the host (`WIDE_CONV_REASON`, `WIDE_ADD_REASON`); fusion lifts exactly those two reasons.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.quant.techniques.channel_scales import channel_attr
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.backends.vta.te import IDENTITY_BITS, move_reason
from vtakit.compiler.options import QUANT_OPTIONS, WideResidualMode
from vtakit.compiler.quant.techniques.registry import Stage, Technique, register
from vtakit.isa.config import HwConfig

WIDE_NOTE = "wide_residual"
"""The graph note: the most extra bits a conv feeding a residual add may keep (0 or absent: none)."""
WIDE_BITS = 8
"""Extra bits a wide conv keeps at most (the rest of int32 is the bound's)."""
INT32_MAX = 2 ** 31 - 1
WIDE_CONV_REASON = "keeps a wide (int32) result for its residual add: runs on the accelerator only fused with it"
WIDE_ADD_REASON = "reads a conv's wide (int32) result: runs on the accelerator only fused into that conv"


def wide_bits(cfg: HwConfig) -> int:
    """The configuration's limit on k (see the module docstring)."""
    return min(WIDE_BITS, IDENTITY_BITS) if not cfg.acc8_load and move_reason(cfg) is None else 0


def mark(g: Graph, cfg: HwConfig, mode: WideResidualMode | str) -> None:
    """Note on the float graph how many extra bits a conv feeding a residual add may keep for `cfg`
    (0 with mode "off"); quantize reads it.  "auto" is the recipe search's to resolve first (recipe_search.py)."""
    on = WideResidualMode.parse(mode, concrete=True) is WideResidualMode.ON
    g.notes[WIDE_NOTE] = wide_bits(cfg) if on else 0


def wide_pairs(g: Graph, int8: frozenset[str], keeps_int32: frozenset[str]) -> dict[str, str]:
    """conv output tensor -> the skip tensor it is added to, for every int8 same-shape add one of whose
    operands is an int8 conv (no groups, no fused activation, the add its only reader, no graph output);
    of two such operands the later conv, as `fusion.fuse_residual_adds` picks."""
    if not g.notes.get(WIDE_NOTE):
        return {}
    users, producers = g.consumers(), g.producers()
    order = {n.name: i for i, n in enumerate(g.nodes)}
    pairs: dict[str, str] = {}
    for n in g.nodes:
        if n.op != "Add" or n.name not in int8 or len(n.inputs) != 2 or n.inputs[0] == n.inputs[1]:
            continue
        options = [(order[c.name], i) for i, t in enumerate(n.inputs)
                   if (c := producers.get(t)) is not None and c.op == "Conv" and c.name in int8
                   and c.name not in keeps_int32 and c.attrs.get("group", 1) == 1 and c.attrs.get("act") is None
                   and [u.name for u in users.get(t, [])] == [n.name] and t not in g.outputs]
        if options:
            i = max(options)[1]
            pairs[n.inputs[i]] = n.inputs[1 - i]
    return pairs


def _fits(bound: np.ndarray, k: int) -> bool:
    """Whether |y| <= bound (per channel, y the wide result) plus the skip << k stays inside int32."""
    return int(bound.max(initial=0)) + 1 + (128 << k) <= INT32_MAX


def _half(steps: np.ndarray) -> np.ndarray:
    """Half of 2**steps (0 where steps <= 0): the rounding term of a shift right by `steps`."""
    return np.where(steps > 0, np.left_shift(1, np.maximum(steps - 1, 0)), 0).astype(np.int64)


def final_rounding(attrs: dict, add_shift: int) -> np.ndarray:
    """What the bias gains so that the add's final shift (s2 + k) rounds to nearest, not down, beside the
    half output step the conv's bias has already: pow2 2**(s1 + s2 - 1) - 2**(s1 - 1); with a multiplier
    the same in accumulator units, floor(2**(p + n + s2 - 1) / M) - floor(2**(p + n - 1) / M)."""
    shifts = np.asarray(attrs["shift"], np.int64)
    if "multiplier" not in attrs:
        return _half(shifts + add_shift) - _half(shifts)
    m = np.asarray(attrs["multiplier"], np.int64)
    total = attrs["pre_shift"] + shifts
    def step(t):
        return np.floor(np.exp2((t - 1).astype(np.float64)) / np.maximum(m, 1)).astype(np.int64)
    return np.where(m > 0, step(total + add_shift) - step(total), 0)


def widen(g: Graph, w_q: np.ndarray, bias_q: np.ndarray, attrs: dict,
          add_shift: int) -> tuple[int, np.ndarray, dict] | None:
    """(k, bias', attrs) of the wide conv for its int8 requantization (`attrs`: shift and clip, or a
    fixed-point pre_shift, multiplier and shift; `bias_q` with its rounding) and its add's own shift s2
    (e_skip - e_out), or None where even k = 0 could wrap int32 (the conv then keeps its int8 result)."""
    limit = int(g.notes.get(WIDE_NOTE) or 0)
    flat = w_q.reshape(w_q.shape[0], -1).astype(np.int64)
    shifts = np.broadcast_to(np.asarray(attrs["shift"], np.int64), flat.shape[:1])
    fixed = "multiplier" in attrs
    bias_q = bias_q.astype(np.int64) + np.broadcast_to(final_rounding(attrs, add_shift), flat.shape[:1])

    def half(k: int) -> np.ndarray:  # pow2: half a step of the wider grid too (Y rounds to nearest)
        return np.zeros_like(shifts) if fixed or k == 0 else _half(shifts - k)

    def fits(k: int) -> bool:
        bound = 128 * np.sum(np.abs(flat), axis=1) + np.abs(bias_q + half(k))
        product = ((bound >> attrs["pre_shift"]) + 1) * np.asarray(attrs["multiplier"], np.int64) if fixed else bound
        return _fits(product >> (shifts - k), k) and int(bound.max(initial=0)) <= INT32_MAX

    k = next((k for k in range(min(limit, int(shifts.min())), -1, -1) if fits(k)), None)
    if k is None:
        return None
    wide = {key: v for key, v in attrs.items() if key != "clip"}
    wide.update(shift=channel_attr(shifts - k), wide=k)
    return k, bias_q + half(k), wide


def reader_output(g: Graph, tensor: str, readers: dict[str, list[Node]] | None = None) -> str:
    """The output of the add reading a wide conv's result (its only reader); `readers`: g.consumers(),
    where the caller asks for many (a walk over the graph each time is quadratic)."""
    return (g.consumers() if readers is None else readers)[tensor][0].outputs[0]


register(Technique("wide_residual", Stage.MARK, mark, QUANT_OPTIONS["wide_residual"], note=WIDE_NOTE,
                   doc="convs feeding a residual add keep extra bits into the add (quantize reads the note)"))
