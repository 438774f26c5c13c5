"""The loop-nest IR a schedule produces, and its walk into a statement sequence.

After scheduling, an operator is a perfect nest of *outer* (tile) loops, which
the instruction stream unrolls, around an *inner* box executed by GEMM / ALU
instructions (two loops folded into iter_out / iter_in, the rest as micro-ops).
Transfers are attached to loop levels: level k means "once per iteration of the
k-th outer loop", level 0 is once per operator.  A virtual-thread loop runs its
body once per thread, the threads' statements interleaved in lockstep so that
one thread's transfers can overlap another's compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest

from vtakit.compiler.backends.vta.te import ComputeDef
from vtakit.isa.arith import ceil_div


@dataclass(frozen=True)
class Loop:
    name: str
    extent: int
    vthread: bool = False


@dataclass(frozen=True)
class Part:
    """One loop's contribution to an axis: axis += stride * loop (or a fused loop's share)."""

    loop: str
    stride: int


@dataclass
class LoopNest:
    compute: ComputeDef
    outer: list[Loop]
    inner: list[Loop]
    inner_axis: dict[str, str]
    """inner loop name -> the axis it walks (stride 1)."""
    parts: dict[str, list[Part]]
    """axis -> its outer parts."""
    fused: dict[str, tuple[str, str, int]]
    """fused loop -> (outer component, inner component, inner component's extent)."""
    scopes: dict[str, str]
    """tensor -> on-chip scope (inp, wgt, acc)."""
    placement: dict[str, int]
    """tensor -> level its transfer happens at (the output: where its acc tile lives)."""
    intrinsic: str = "gemm"
    vthread_level: int | None = None
    steps: tuple = field(default=())

    # -------------------------------------------------------------- geometry
    @property
    def compute_level(self) -> int:
        return len(self.outer)

    @property
    def vthreads(self) -> int:
        return self.outer[self.vthread_level].extent if self.vthread_level is not None else 1

    def per_thread(self, tensor: str) -> bool:
        """Transfers below the virtual-thread loop get one buffer copy per thread."""
        return self.vthread_level is not None and self.placement[tensor] > self.vthread_level

    def expand(self, env: dict[str, int]) -> dict[str, int]:
        """Values of the loops fused loops stand for."""
        out = dict(env)
        for f, (a, b, b_ext) in self.fused.items():
            if f in env:
                out[a], out[b] = divmod(env[f], b_ext)
        return out

    def box(self, env: dict[str, int], level: int) -> dict[str, tuple[int, int]] | None:
        """(start, length) of every axis over the iterations below `level`, given the
        values of the loops above it; None when the tile lies wholly outside an axis."""
        fixed = self.expand(env)
        free = {lp.name: lp.extent for lp in self.outer[level:]}
        for f, (a, b, b_ext) in self.fused.items():
            if f in free:
                free[a], free[b] = ceil_div(free[f], b_ext), b_ext
        inner_ext = {self.inner_axis[lp.name]: lp.extent for lp in self.inner}
        box = {}
        for ax in self.compute.axes:
            start, span = 0, inner_ext.get(ax.name, 1)
            for p in self.parts.get(ax.name, []):
                if p.loop in fixed:
                    start += p.stride * fixed[p.loop]
                elif p.loop in free:
                    span += p.stride * (free[p.loop] - 1)
            if start >= ax.extent:
                return None
            box[ax.name] = (start, min(span, ax.extent - start))
        return box


@dataclass(frozen=True)
class Stmt:
    """One thing to emit: a tensor transfer in, the output tile's start or end, or the compute."""

    kind: str          # "load" | "out_begin" | "compute" | "out_end"
    env: tuple[tuple[str, int], ...]
    thread: int
    tensor: str = ""

    @property
    def values(self) -> dict[str, int]:
        return dict(self.env)


def _segments(stmts: list[Stmt]) -> list[list[Stmt]]:
    """Group a thread's statements for interleaving: a run of transfers stays together
    (so one thread's loads go out back to back), everything else stands alone."""
    out: list[list[Stmt]] = []
    for s in stmts:
        if s.kind == "load" and out and out[-1][-1].kind == "load":
            out[-1].append(s)
        else:
            out.append([s])
    return out


def walk(nest: LoopNest) -> list[Stmt]:
    """All statements of the operator in program order (tile loops unrolled)."""
    out_name = nest.compute.out.tensor.name
    init = nest.compute.init.tensor.name if nest.compute.init is not None else None
    at_level: dict[int, list[str]] = {}
    for tensor, level in nest.placement.items():
        if tensor not in (out_name, init):  # the init tensor arrives with the output tile
            at_level.setdefault(level, []).append(tensor)
    out_level = nest.placement[out_name]

    def visit(level: int, env: dict[str, int], thread: int) -> list[Stmt]:
        if nest.box(env, level) is None:
            return []
        key = tuple(env.items())
        stmts = [Stmt("load", key, thread, t) for t in sorted(at_level.get(level, []))]
        if level == out_level:
            stmts.append(Stmt("out_begin", key, thread, out_name))
        if level == nest.compute_level:
            stmts.append(Stmt("compute", key, thread))
        else:
            loop = nest.outer[level]
            if loop.vthread:
                per_thread = [_segments(visit(level + 1, {**env, loop.name: v}, v))
                              for v in range(loop.extent)]
                stmts += [s for group in zip_longest(*per_thread) for seg in group if seg for s in seg]
            else:
                for v in range(loop.extent):
                    stmts += visit(level + 1, {**env, loop.name: v}, thread)
        if level == out_level:
            stmts.append(Stmt("out_end", key, thread, out_name))
        return stmts

    return visit(0, {}, 0)

