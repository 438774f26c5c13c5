"""Activation exponents judged at the network's output, and layers kept in float until a target is met.

Local calibration (calibration.py) judges each tensor by its own error; over a deep network the errors
compound, and one step finer or coarser on one tensor can cost or save more at the output than its
own error says.  `search_exponents` is a coordinate descent over the exponent groups
(`quantize.exponent_groups`) in graph order: from the current exponent it tries one step finer and
one coarser and keeps moving in a direction while the error drops.  Each candidate is the int8
graph itself (quantize), run on the host interpreter, which computes what the accelerator computes
bit for bit, on the calibration samples, and judged against the float model's outputs:
the mean over samples of |int8 - float|^2 / |float|^2 (`output_error`).

`keep_float_until` is the other lever: it keeps one layer at a time in float on the host, each
time the one whose float version lowers that error most, until the mean output cosine on the
calibration samples reaches a target.

What is cached: the weight exponents (they depend on the weights alone; `quantize`'s
weight_cache), and every sample's values up to the first node a candidate graph changes (a
changed exponent alters only the nodes from its group's first producer on).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.quant.calibration import MethodCalibration
from vtakit.compiler.ops.execute import check_feeds, run_graph, run_node
from vtakit.compiler.ir import Graph, Node
from vtakit.compiler.ops import int8_rule
from vtakit.compiler.quant.precision import keep_nodes_float, precision_plan
from vtakit.compiler.quant.quantize import exponent_groups, quantize

Progress = Callable[[str, int, int], None]
"""progress(phase, done, total): called before each step of a search."""
MAX_STEP = 3
"""How far (in powers of two) the search moves one group from its local exponent."""
DIRECTIONS = (1, -1)
"""The moves tried from each group's exponent: +1 finer (clips more, rounds finer), -1 coarser."""
MIN_GAIN = 1e-3
"""A move is kept when it lowers the output error by at least this fraction: smaller gains on a few
calibration samples are noise more than signal."""
AGREEMENT = 0.75
"""... and lowers it on at least this fraction of the samples (a move one sample likes is overfitting)."""
KEEP_FLOAT_MAX = 8
"""The most layers `keep_float_until` keeps in float."""


@dataclass(frozen=True)
class SearchResult:
    error_before: float  # output_error of the local exponents
    error_after: float
    moved: dict[str, int]  # group (its first tensor) -> the offset kept
    groups: int
    evaluations: int
    seconds: float


@dataclass(frozen=True)
class KeepFloatResult:
    kept: tuple[str, ...]  # in the order chosen
    cosine_before: float  # mean output cosine on the calibration samples
    cosine_after: float
    evaluations: int
    seconds: float


def _relative_error(want: np.ndarray, got: np.ndarray) -> float:
    """The relative squared error of one output, each channel (axis 1 of an output of rank 3 or more: a
    detector's box coordinates and class scores, a segmenter's classes) normalised by its own energy and the
    channels averaged, so a channel of large values does not decide for the small ones.  A channel whose float
    values are all zero is measured against the output's mean channel energy."""
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    if want.ndim < 3 or want.shape[1] <= 1:
        signal, noise = float(np.sum(np.square(want))), float(np.sum(np.square(got - want)))
        return noise / signal if signal > 0 else noise
    axes = tuple(a for a in range(want.ndim) if a != 1)
    signal = np.sum(np.square(want), axis=axes)
    noise = np.sum(np.square(got - want), axis=axes)
    mean_signal = float(np.mean(signal))
    if mean_signal == 0:
        return float(np.sum(noise))
    return float(np.mean(noise / np.where(signal > 0, signal, mean_signal)))


def error_table(want: list[dict[str, np.ndarray]], got: list[dict[str, np.ndarray]]) -> tuple[list[str], np.ndarray]:
    """(output names, their relative squared errors (`_relative_error`) as a samples x outputs array)."""
    names = list(want[0]) if want else []
    return names, np.array([[_relative_error(w[o], g[o]) for o in names] for w, g in zip(want, got)]).reshape(
        len(want), len(names))


def sample_errors(want: list[dict[str, np.ndarray]], got: list[dict[str, np.ndarray]]) -> np.ndarray:
    """Per sample, the relative squared error of the outputs, each output (and each channel of one) normalised
    by its own energy and the outputs averaged (`_relative_error`): every output counts alike."""
    return error_table(want, got)[1].mean(axis=1)


def output_errors(want: list[dict[str, np.ndarray]], got: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Each output's relative squared error (`_relative_error`), the mean over the samples."""
    names, table = error_table(want, got)
    return dict(zip(names, map(float, table.mean(axis=0))))


def output_error(want: list[dict[str, np.ndarray]], got: list[dict[str, np.ndarray]]) -> float:
    """Mean over samples of the relative squared error of all outputs together."""
    return float(np.mean(sample_errors(want, got)))


def output_cosine(want: list[dict[str, np.ndarray]], got: list[dict[str, np.ndarray]]) -> float:
    """Mean over samples of the cosine between all outputs together."""
    cos = []
    for w, g in zip(want, got):
        a = np.concatenate([np.asarray(w[o], np.float64).ravel() for o in w])
        b = np.concatenate([np.asarray(g[o], np.float64).ravel() for o in w])
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        cos.append(float(a @ b / (na * nb)) if na > 0 and nb > 0 else float(na == nb))
    return float(np.mean(cos))


def check_target(target: float) -> float:
    if not isinstance(target, (int, float)) or isinstance(target, bool) or not 0 < target <= 1:
        raise CompileError(f"keep_float_until must be a cosine in (0, 1], got {target!r}")
    return float(target)


def _same_node(a: Graph, x: Node, b: Graph, y: Node) -> bool:
    if (x.op, x.name, x.inputs, x.outputs) != (y.op, y.name, y.inputs, y.outputs):
        return False
    if x.attrs.keys() != y.attrs.keys() or any(not _same_value(x.attrs[k], y.attrs[k]) for k in x.attrs):
        return False
    if any(a.tensors.get(t) != b.tensors.get(t) for t in x.outputs):
        return False
    return all(_same_value(a.consts[t], b.consts.get(t)) for t in x.inputs if t in a.consts)


def _same_value(u, v) -> bool:
    if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
        return isinstance(u, np.ndarray) and isinstance(v, np.ndarray) and u.dtype == v.dtype \
            and np.array_equal(u, v)
    return type(u) is type(v) and u == v


def first_difference(a: Graph, b: Graph) -> int | None:
    """Index of the first node of `b` that computes something else than `a`'s (None: same graph)."""
    for i, (x, y) in enumerate(zip(a.nodes, b.nodes)):
        if not _same_node(a, x, b, y):
            return i
    if len(a.nodes) != len(b.nodes) or a.outputs != b.outputs:
        return min(len(a.nodes), len(b.nodes))
    return None


class _Runner:
    """The int8 graph on the calibration samples, rerun from the first node a candidate changes."""

    def __init__(self, samples: list[dict[str, np.ndarray]], want: list[dict[str, np.ndarray]]):
        self.samples, self.want = samples, want
        self.graph: Graph | None = None
        self.envs: list[dict[str, np.ndarray]] = []
        self.error = math.inf
        self.errors = np.full(len(samples), math.inf)
        self.cosine = 0.0
        self.evaluations = 0

    def _run(self, q: Graph, start: int) -> list[dict[str, np.ndarray]]:
        self.evaluations += 1
        envs = []
        for i, s in enumerate(self.samples):
            env = dict(self.envs[i]) if start > 0 else dict(check_feeds(q, s))
            env.update(q.consts)
            for n in q.nodes[start:]:
                env[n.outputs[0]] = run_node(n, [env[t] if t else None for t in n.inputs])
            envs.append(env)
        return envs

    def _outputs(self, q: Graph, envs) -> list[dict[str, np.ndarray]]:
        return [{o: env[o] for o in q.outputs} for env in envs]

    def accept(self, q: Graph, envs=None) -> None:
        self.envs = self._run(q, 0) if envs is None else envs
        self.graph = q
        got = self._outputs(q, self.envs)
        self.errors = sample_errors(self.want, got)
        self.error, self.cosine = float(np.mean(self.errors)), output_cosine(self.want, got)

    def trial(self, q: Graph) -> tuple[float, list, float] | None:
        """(output error, values, fraction of samples whose error it lowers) of candidate `q`; None
        when it computes what the accepted graph does."""
        start = first_difference(self.graph, q)
        if start is None:
            return None
        envs = self._run(q, start)
        errors = sample_errors(self.want, self._outputs(q, envs))
        return float(np.mean(errors)), envs, float(np.mean(errors < self.errors))


def float_outputs(graph: Graph, samples: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """What the int8 graph is judged against: the float graph's outputs on the samples."""
    return [run_graph(graph, dict(s)) for s in samples]


def _groups_in_order(g: Graph) -> list[list[str]]:
    """The exponent groups of g's int8 tensors, ordered by where their first member is produced."""
    plan = precision_plan(g)
    groups, tensors = exponent_groups(g, [n for n in g.nodes if n.name in plan.int8])
    where = {t: i for i, n in enumerate(g.nodes) for t in n.outputs}
    members: dict[str, list[str]] = {}
    for t in sorted(tensors, key=lambda t: (where.get(t, -1), t)):
        members.setdefault(groups.find(t), []).append(t)
    return sorted(members.values(), key=lambda m: where.get(m[0], -1))


def search_exponents(g: Graph, cal: MethodCalibration, samples: list[dict[str, np.ndarray]],
                     want: list[dict[str, np.ndarray]], progress: Progress | None = None,
                     weight_cache: dict | None = None) -> SearchResult:
    """Move each exponent group of `g` (nodes marked keep_float stay float) by the output error on
    `samples` against `want` (see the module docstring); the moves land in `cal.offsets`."""
    t0 = time.perf_counter()
    cache = {} if weight_cache is None else weight_cache
    runner = _Runner(samples, want)
    runner.accept(quantize(g, cal, cache))
    before = runner.error
    order = _groups_in_order(g)
    moved: dict[str, int] = {}
    for k, members in enumerate(order):
        if progress is not None:
            progress("exponent search", k, len(order))
        kept = cal.offsets.get(members[0], 0)
        for direction in DIRECTIONS:
            step = kept + direction
            while abs(step) <= MAX_STEP:
                cal.offsets.update({t: step for t in members})
                q = quantize(g, cal, cache)
                trial = runner.trial(q)
                if trial is None or trial[0] > runner.error * (1 - MIN_GAIN) or trial[2] < AGREEMENT:
                    break
                runner.accept(q, trial[1])
                kept, step = step, step + direction
            cal.offsets.update({t: kept for t in members})
            if kept != 0:
                moved[members[0]] = kept
                break
    if progress is not None:
        progress("exponent search", len(order), len(order))
    return SearchResult(before, runner.error, moved, len(order), runner.evaluations, time.perf_counter() - t0)


def keep_float_until(g: Graph, cal: MethodCalibration, samples: list[dict[str, np.ndarray]],
                     want: list[dict[str, np.ndarray]], target: float, *, max_nodes: int = KEEP_FLOAT_MAX,
                     progress: Progress | None = None, weight_cache: dict | None = None,
                     uncorrected: Graph | None = None) -> KeepFloatResult:
    """Keep the layers (conv, dense, add computing in int8) whose float version lowers the output
    error most, one at a time, until the mean output cosine on `samples` reaches `target` or
    `max_nodes` are kept.  Nodes `g` already marks keep_float stay so; `uncorrected`: the graph
    before bias correction, whose biases kept nodes take (`precision.keep_nodes_float`)."""
    check_target(target)
    t0 = time.perf_counter()
    cache = {} if weight_cache is None else weight_cache
    runner = _Runner(samples, want)
    runner.accept(quantize(g, cal, cache))
    before = runner.cosine
    kept: list[str] = []
    while runner.cosine < target and len(kept) < max_nodes:
        plan = precision_plan(keep_nodes_float(g, kept, uncorrected))
        cands = [n.name for n in g.nodes if n.name in plan.int8 and int8_rule(n.op) in ("weights", "sum")]
        best = None
        for i, name in enumerate(cands):
            if progress is not None:
                progress(f"keep float ({len(kept) + 1} of at most {max_nodes})", i, len(cands))
            q = quantize(keep_nodes_float(g, kept + [name], uncorrected), cal, cache)
            trial = runner.trial(q)
            if trial is not None and (best is None or trial[0] < best[0]):
                best = (trial[0], name, q, trial[1])
        if best is None or best[0] >= runner.error:
            break
        runner.accept(best[2], best[3])
        kept.append(best[1])
    return KeepFloatResult(tuple(kept), before, runner.cosine, runner.evaluations, time.perf_counter() - t0)
