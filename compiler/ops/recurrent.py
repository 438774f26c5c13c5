"""Recurrent ops: LSTM, GRU and RNN on the host, in numpy, every ONNX form.

`onnx.reference` runs these only forward or reverse, and CRNN text recognizers (ddddocr's
`common.onnx`, most CTC OCR models) read their conv features with a bidirectional LSTM.  So they
have their own kernel here: both directions and "bidirectional", `layout` 0 and 1,
`sequence_lens` (steps past a sequence's length give zeros; the reverse direction starts at its
last step), initial states, peepholes, `clip`, `input_forget`, GRU's `linear_before_reset`, and
every activation ONNX lists, with `activation_alpha` / `activation_beta` consumed in order by the
activations that take them (onnxruntime's reading).  They stay in float (no int8 form).

A multi-output node becomes one IR node per output read, as in `reference.py`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.ops.registry import OpDef, Precision, contiguous, register, text
from vtakit.errors import CompileError


@dataclass(frozen=True)
class Activation:
    """An activation's ONNX name and which of alpha / beta it takes, with their defaults."""

    fn: object
    alpha: float | None = None
    beta: float | None = None


def _sigmoid(x, a, b):
    return 1.0 / (1.0 + np.exp(-x))


ACTIVATIONS = {  # ONNX's list for RNN/GRU/LSTM (lower case: names are case-insensitive)
    "relu": Activation(lambda x, a, b: np.maximum(x, 0)),
    "tanh": Activation(lambda x, a, b: np.tanh(x)),
    "sigmoid": Activation(_sigmoid),
    "affine": Activation(lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": Activation(lambda x, a, b: np.where(x >= 0, x, a * x), 0.01),
    "thresholdedrelu": Activation(lambda x, a, b: np.where(x > a, x, 0), 1.0),
    "scaledtanh": Activation(lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": Activation(lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": Activation(lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)), 1.0),
    "softsign": Activation(lambda x, a, b: x / (1 + np.abs(x))),
    "softplus": Activation(lambda x, a, b: np.log1p(np.exp(x))),
}


@dataclass(frozen=True)
class Cell:
    """What differs between the three ops: gate count, default activations, the inputs they read."""

    gates: int
    activations: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


CELLS = {
    "LSTM": Cell(4, ("sigmoid", "tanh", "tanh"),
                 ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"), ("Y", "Y_h", "Y_c")),
    "GRU": Cell(3, ("sigmoid", "tanh"), ("X", "W", "R", "B", "sequence_lens", "initial_h"), ("Y", "Y_h")),
    "RNN": Cell(1, ("tanh",), ("X", "W", "R", "B", "sequence_lens", "initial_h"), ("Y", "Y_h")),
}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


# ------------------------------------------------------------------------------------------ import
def _resolve_activations(op: str, name: str, at: dict, dirs: int) -> list[list]:
    """Per direction, [name, alpha, beta] for each of the cell's activation functions."""
    cell = CELLS[op]
    names = [text(a).lower() for a in at.get("activations", [])] or list(cell.activations) * dirs
    want = len(cell.activations) * dirs
    if len(names) != want:
        raise CompileError(f"activations lists {len(names)} functions; {op} with {dirs} direction(s) takes {want}",
                           node=name, op=op)
    alphas, betas = list(at.get("activation_alpha", [])), list(at.get("activation_beta", []))
    out = []
    for fn in names:
        if fn not in ACTIVATIONS:
            raise CompileError(f"activation {fn!r} is not one ONNX defines for {op} ({', '.join(ACTIVATIONS)})",
                               node=name, op=op)
        spec = ACTIVATIONS[fn]
        alpha = (float(alphas.pop(0)) if alphas else spec.alpha) if spec.alpha is not None else 0.0
        beta = (float(betas.pop(0)) if betas else spec.beta) if spec.beta is not None else 0.0
        out.append([fn, alpha, beta])
    return out


def _convert(imp, n, name: str, at: dict) -> None:
    op = n.op_type
    cell = CELLS[op]
    g = imp.graph
    direction = text(at.get("direction"), "forward")
    if direction not in DIRECTIONS:
        raise CompileError(f"direction {direction!r} is not forward, reverse or bidirectional", node=name, op=op)
    dirs = DIRECTIONS[direction]
    layout = int(at.get("layout", 0))
    if layout not in (0, 1):
        raise CompileError(f"layout {layout} is not 0 or 1", node=name, op=op)
    x, w, r = (g.tensors[t].shape for t in n.input[:3])
    hidden = int(at.get("hidden_size", r[-1] if len(r) == 3 else 0))
    if len(x) != 3:
        raise CompileError(f"X must be 3-D (sequence, batch, input), got {x}", node=name, op=op)
    if tuple(w) != (dirs, cell.gates * hidden, x[2]) or tuple(r) != (dirs, cell.gates * hidden, hidden):
        raise CompileError(f"W {tuple(w)} and R {tuple(r)} do not fit {dirs} direction(s), hidden_size {hidden}, "
                           f"{x[2]} inputs ({cell.gates} gates)", node=name, op=op)
    attrs = dict(cell=op, direction=direction, hidden=hidden, layout=layout,
                 activations=_resolve_activations(op, name, at, dirs),
                 clip=float(at["clip"]) if at.get("clip") is not None else None,
                 input_forget=int(at.get("input_forget", 0)), linear_before_reset=int(at.get("linear_before_reset", 0)))
    outs = list(n.output)
    for idx, out in enumerate(outs):
        if out:
            imp.emit(op, name if idx == 0 else f"{name}.{idx}", list(n.input), [out], dict(attrs, out=idx))


def _infer(node: Node, g: Graph) -> list[TensorInfo]:
    a = node.attrs
    x = g.tensors[node.inputs[0]]
    seq, batch = (x.shape[0], x.shape[1]) if a["layout"] == 0 else (x.shape[1], x.shape[0])
    dirs, h = DIRECTIONS[a["direction"]], a["hidden"]
    if a["out"] == 0:
        shape = (seq, dirs, batch, h) if a["layout"] == 0 else (batch, seq, dirs, h)
    else:
        shape = (dirs, batch, h) if a["layout"] == 0 else (batch, dirs, h)
    return [TensorInfo(shape, x.dtype)]


# ------------------------------------------------------------------------------------------ run
def _act(spec: list, x: np.ndarray) -> np.ndarray:
    fn, alpha, beta = spec
    return ACTIVATIONS[fn].fn(x, np.float32(alpha), np.float32(beta)).astype(x.dtype)


def _clip(a: dict, v: np.ndarray) -> np.ndarray:
    return v if a["clip"] is None else np.clip(v, -a["clip"], a["clip"])


def _lstm_step(a, acts, x_proj, h, c, r, rb, p):
    hd = a["hidden"]
    gates = x_proj + h @ r.T + rb
    gi, go, gf, gc = (gates[:, k * hd:(k + 1) * hd] for k in range(4))
    pi, po, pf = (p[k * hd:(k + 1) * hd] for k in range(3))
    i = _act(acts[0], _clip(a, gi + pi * c))
    f = 1 - i if a["input_forget"] else _act(acts[0], _clip(a, gf + pf * c))
    c_new = f * c + i * _act(acts[1], _clip(a, gc))
    o = _act(acts[0], _clip(a, go + po * c_new))
    return o * _act(acts[2], c_new), c_new


def _gru_step(a, acts, x_proj, h, c, r, rb, p):
    hd = a["hidden"]
    xz, xr, xh = (x_proj[:, k * hd:(k + 1) * hd] for k in range(3))
    rz, rr, rh = (r[k * hd:(k + 1) * hd] for k in range(3))
    bz, br, bh = (rb[k * hd:(k + 1) * hd] for k in range(3))
    z = _act(acts[0], _clip(a, xz + h @ rz.T + bz))
    reset = _act(acts[0], _clip(a, xr + h @ rr.T + br))
    if a["linear_before_reset"]:
        cand = xh + reset * (h @ rh.T + bh)
    else:
        cand = xh + (reset * h) @ rh.T + bh
    cand = _act(acts[1], _clip(a, cand))
    return (1 - z) * cand + z * h, c


def _rnn_step(a, acts, x_proj, h, c, r, rb, p):
    return _act(acts[0], _clip(a, x_proj + h @ r.T + rb)), c


STEPS = {"LSTM": _lstm_step, "GRU": _gru_step, "RNN": _rnn_step}


def _state(v, layout: int, shape: tuple[int, int, int], dtype) -> np.ndarray:
    """An initial state as (directions, batch, hidden); zeros when absent."""
    if v is None:
        return np.zeros(shape, dtype)
    v = np.asarray(v, dtype)
    return v.transpose(1, 0, 2) if layout == 1 else v


_last = threading.local()  # the last run's arguments and outputs, per thread (`_run`)


def _run(node: Node, args: list, k) -> np.ndarray:
    """One output of the cell (`out`: Y, Y_h or Y_c).  A node whose several outputs are read is several IR
    nodes with the same inputs: the second reuses the first's run (the same argument arrays, the same
    attributes but `out`) instead of computing the whole sequence again."""
    a = node.attrs
    same = {k: v for k, v in a.items() if k != "out"}
    cached = getattr(_last, "run", None)
    if (cached is not None and cached[1] == same and len(cached[0]) == len(args)
            and all(x is y for x, y in zip(cached[0], args))):
        outs = cached[2]
    else:
        outs = _run_all(a, args)
        _last.run = (list(args), same, outs)
    out = outs[a["out"]]
    if a["layout"] == 1:
        out = out.transpose(2, 0, 1, 3) if a["out"] == 0 else out.transpose(1, 0, 2)
    return contiguous(out)


def _run_all(a: dict, args: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Y, Y_h and Y_c of the cell in ONNX's layout 0."""
    cell = CELLS[a["cell"]]
    named = dict(zip(cell.inputs, list(args) + [None] * (len(cell.inputs) - len(args))))
    x = np.asarray(named["X"])
    dtype = x.dtype if x.dtype == np.float64 else np.dtype(np.float32)
    x = x.astype(dtype)
    if a["layout"] == 1:
        x = x.transpose(1, 0, 2)
    seq, batch, _ = x.shape
    dirs, hd, gates = DIRECTIONS[a["direction"]], a["hidden"], cell.gates
    w, r = np.asarray(named["W"], dtype), np.asarray(named["R"], dtype)
    b = np.zeros((dirs, 2 * gates * hd), dtype) if named["B"] is None else np.asarray(named["B"], dtype)
    lens = np.full(batch, seq) if named["sequence_lens"] is None else np.asarray(named["sequence_lens"]).astype(int)
    h0, c0 = (_state(named.get(k), a["layout"], (dirs, batch, hd), dtype) for k in ("initial_h", "initial_c"))
    p = np.zeros((dirs, 3 * hd), dtype) if named.get("P") is None else np.asarray(named["P"], dtype)
    y = np.zeros((seq, dirs, batch, hd), dtype)
    y_h, y_c = np.empty((dirs, batch, hd), dtype), np.empty((dirs, batch, hd), dtype)
    n_act = len(a["activations"]) // dirs
    for d in range(dirs):
        reverse = a["direction"] == "reverse" or d == 1
        acts = a["activations"][d * n_act:(d + 1) * n_act]
        x_proj = x @ w[d].T + b[d, :gates * hd]  # every step's input projection at once
        h, c = h0[d], c0[d]
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            live = (t < lens)[:, None]
            h_new, c_new = STEPS[a["cell"]](a, acts, x_proj[t], h, c, r[d], b[d, gates * hd:], p[d])
            h, c = np.where(live, h_new, h), np.where(live, c_new, c)
            y[t, d] = np.where(live, h, 0)
        y_h[d], y_c[d] = h, c
    return y, y_h, y_c


VERSIONS = {"LSTM": (1, 7, 14, 22), "GRU": (1, 3, 7, 14, 22), "RNN": (1, 7, 14, 22)}
for _op, _versions in VERSIONS.items():
    register(OpDef(_op, _infer, _run, Precision.FLOAT, (_op,), _convert, _versions, kernel="numpy",
                   doc="both directions and bidirectional, sequence_lens, every ONNX activation"))
