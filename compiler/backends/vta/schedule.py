"""Schedules: how to tile, order, place and parallelise an operator — as plain data.

A `Schedule` is an immutable list of primitive applications, so a tuner can
enumerate, compare and serialise it (`to_json` / `from_json`):

    s = (Schedule()
         .tile("oh", "ow", 8, 56)                  # split both, order oh.o ow.o oh.i ow.i
         .split("oc", 4).split("ic", 4)
         .reorder("oc.o", "oh.o", "ow.o", "ic.o", "oh.i", "ow.i", "oc.i", "ic.i", "kh", "kw")
         .virtual_thread("oh.o", 2)                # two threads, each with its own buffers
         .cache_read("data", "inp").cache_read("weight", "wgt").cache_write("out", "acc")
         .dma_copy("data", "ic.o").dma_copy("weight", "ic.o").dma_copy("out", "ow.o")
         .tensorize("oh.i", "gemm"))                # oh.i and everything inside it: GEMM instructions

Loop names: an axis is a loop of its own name; `split(x, f)` makes `x.o` and `x.i`;
`fuse(a, b)` makes `a+b`; `virtual_thread(x, n)` makes `x.v` (the thread) and `x.t`.
`apply` checks everything and returns the LoopNest; mistakes are CompileErrors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.loopnest import Loop, LoopNest, Part
from vtakit.compiler.backends.vta.te import ComputeDef
from vtakit.isa.opcodes import MemId
from vtakit.isa.arith import ceil_div

SCOPE_OF_MEM = {MemId.INP: "inp", MemId.WGT: "wgt", MemId.ACC: "acc", MemId.ACC_8BIT: "acc",
                MemId.OUT: "acc"}
_PRIMITIVES = {"split": 2, "tile": 4, "reorder": None, "fuse": 2, "cache_read": 2, "cache_write": 2,
               "dma_copy": 2, "tensorize": 2, "virtual_thread": 2}


@dataclass(frozen=True)
class Schedule:
    steps: tuple[tuple, ...] = ()

    def _add(self, *step) -> "Schedule":
        return Schedule(self.steps + (tuple(step),))

    def split(self, loop: str, factor: int) -> "Schedule":
        return self._add("split", loop, int(factor))

    def tile(self, x: str, y: str, fx: int, fy: int) -> "Schedule":
        return self._add("tile", x, y, int(fx), int(fy))

    def reorder(self, *loops: str) -> "Schedule":
        return self._add("reorder", *loops)

    def fuse(self, a: str, b: str) -> "Schedule":
        return self._add("fuse", a, b)

    def cache_read(self, tensor: str, scope: str) -> "Schedule":
        return self._add("cache_read", tensor, scope)

    def cache_write(self, tensor: str, scope: str) -> "Schedule":
        return self._add("cache_write", tensor, scope)

    def dma_copy(self, tensor: str, at: str) -> "Schedule":
        """pragma dma_copy: the tensor's transfer happens once per iteration of loop `at` ("root": once)."""
        return self._add("dma_copy", tensor, at)

    def tensorize(self, loop: str, intrinsic: str) -> "Schedule":
        return self._add("tensorize", loop, intrinsic)

    def virtual_thread(self, loop: str, n: int) -> "Schedule":
        return self._add("virtual_thread", loop, int(n))

    def to_json(self) -> str:
        return json.dumps([list(s) for s in self.steps])

    @staticmethod
    def from_json(text: str) -> "Schedule":
        try:
            steps = json.loads(text)
        except json.JSONDecodeError as e:
            raise CompileError(f"schedule is not valid JSON: {e}") from None
        for s in steps:
            if not isinstance(s, list) or not s or s[0] not in _PRIMITIVES:
                raise CompileError(f"unknown schedule step {s!r}")
            want = _PRIMITIVES[s[0]]
            if want is not None and len(s) - 1 != want:
                raise CompileError(f"schedule step {s[0]} takes {want} arguments, got {len(s) - 1}")
        return Schedule(tuple(tuple(s) for s in steps))

    def __str__(self) -> str:
        return "\n".join(f"{s[0]}({', '.join(map(repr, s[1:]))})" for s in self.steps)


class _State:
    """Loops while primitives are applied: order, extents, owning axis, outermost-ness."""

    def __init__(self, compute: ComputeDef):
        self.compute = compute
        self.order = [a.name for a in compute.axes]
        self.extent = {a.name: a.extent for a in compute.axes}
        self.axis = {a.name: a.name for a in compute.axes}   # loop -> axis ('' for fused)
        self.stride = {a.name: 1 for a in compute.axes}
        self.outermost = {a.name: True for a in compute.axes}
        self.fused: dict[str, tuple[str, str, int]] = {}
        self.vthread: set[str] = set()
        self.scopes: dict[str, str] = {}
        self.placement: dict[str, str] = {}
        self.tensorize: tuple[str, str] | None = None
        self.components: dict[str, str] = {}   # fused component loop -> its fused loop

    def need(self, loop: str) -> int:
        if loop not in self.order:
            raise CompileError(f"schedule names loop {loop!r}, which does not exist here "
                               f"(loops: {', '.join(self.order)})", op=self.compute.name)
        return self.order.index(loop)

    def split(self, loop: str, factor: int, names: tuple[str, str]) -> None:
        i = self.need(loop)
        ext = self.extent[loop]
        if loop in self.fused or loop in self.vthread:
            raise CompileError(f"cannot split {loop!r}: it is fused or a virtual thread", op=self.compute.name)
        if factor < 1:
            raise CompileError(f"split factor {factor} for {loop!r} must be positive", op=self.compute.name)
        if not self.outermost[loop] and ext % factor:
            raise CompileError(f"split of {loop!r} (extent {ext}) by {factor} would overlap tiles: "
                               f"only an axis's outermost loop may be split unevenly", op=self.compute.name)
        outer, inner = names
        self.order[i:i + 1] = [outer, inner]
        self.extent[outer], self.extent[inner] = ceil_div(ext, factor), factor
        self.axis[outer] = self.axis[inner] = self.axis[loop]
        self.stride[outer], self.stride[inner] = self.stride[loop] * factor, self.stride[loop]
        self.outermost[outer], self.outermost[inner] = self.outermost[loop], False

    def reorder(self, loops: tuple[str, ...]) -> None:
        positions = sorted(self.need(lp) for lp in loops)
        if len(set(loops)) != len(loops):
            raise CompileError("reorder lists a loop twice", op=self.compute.name)
        for pos, lp in zip(positions, loops):
            self.order[pos] = lp

    def fuse(self, a: str, b: str) -> None:
        i, j = self.need(a), self.need(b)
        if a in self.fused or b in self.fused:
            raise CompileError("cannot fuse a fused loop again", op=self.compute.name)
        if a in self.vthread or b in self.vthread:
            raise CompileError("cannot fuse a virtual-thread loop", op=self.compute.name)
        if j != i + 1:
            raise CompileError(f"fuse needs adjacent loops, {a!r} and {b!r} are not", op=self.compute.name)
        name = f"{a}+{b}"
        self.order[i:j + 1] = [name]
        self.extent[name] = self.extent[a] * self.extent[b]
        self.fused[name] = (a, b, self.extent[b])
        self.axis[name] = ""
        self.components[a] = self.components[b] = name


def apply(compute: ComputeDef, schedule: Schedule) -> LoopNest:
    """Apply a schedule's primitives in order; every mistake is a CompileError."""
    st = _State(compute)
    tensors = compute.tensors()
    for step in schedule.steps:
        kind, args = step[0], step[1:]
        if kind == "split":
            st.split(args[0], args[1], (f"{args[0]}.o", f"{args[0]}.i"))
        elif kind == "tile":
            x, y, fx, fy = args
            st.split(x, fx, (f"{x}.o", f"{x}.i"))
            st.split(y, fy, (f"{y}.o", f"{y}.i"))
            st.reorder((f"{x}.o", f"{y}.o", f"{x}.i", f"{y}.i"))
        elif kind == "reorder":
            st.reorder(args)
        elif kind == "fuse":
            st.fuse(*args)
        elif kind == "virtual_thread":
            loop, n = args
            ext = st.extent.get(loop, 0)
            st.need(loop)
            if n < 1 or n > max(ext, 1):
                raise CompileError(f"virtual_thread({loop!r}, {n}): loop has extent {ext}", op=compute.name)
            st.split(loop, ceil_div(ext, n), (f"{loop}.v", f"{loop}.t"))
            st.vthread.add(f"{loop}.v")
        elif kind in ("cache_read", "cache_write"):
            tensor, scope = args
            if tensor not in tensors:
                raise CompileError(f"no tensor {tensor!r} (tensors: {', '.join(tensors)})", op=compute.name)
            is_out = tensor == compute.out.tensor.name
            if is_out != (kind == "cache_write"):
                raise CompileError(f"{kind} does not apply to {'the output' if is_out else 'an input'} "
                                   f"{tensor!r}", op=compute.name)
            want = SCOPE_OF_MEM[tensors[tensor].mem]
            if compute.reduce == "max" and tensor == compute.data.tensor.name:
                want = "acc"
            if scope != want:
                raise CompileError(f"{tensor!r} ({tensors[tensor].mem.name} elements) belongs in the "
                                   f"{want} scope, not {scope!r}", op=compute.name)
            st.scopes[tensor] = scope
        elif kind == "dma_copy":
            tensor, at = args
            if tensor not in st.scopes:
                raise CompileError(f"dma_copy of {tensor!r} before its cache_read/cache_write",
                                   op=compute.name)
            if at != "root":
                st.need(at)
            st.placement[tensor] = at
        elif kind == "tensorize":
            st.need(args[0])
            st.tensorize = (args[0], args[1])
        else:
            raise CompileError(f"unknown schedule primitive {kind!r}", op=compute.name)
    return _finish(st)


def _finish(st: _State) -> LoopNest:
    compute = st.compute
    if st.tensorize is None:
        raise CompileError("the schedule never tensorizes (tensorize(loop, 'gemm'|'alu'))", op=compute.name)
    loop, intrinsic = st.tensorize
    want = "gemm" if compute.reduce == "gemm" else "alu"
    if intrinsic != want:
        raise CompileError(f"{compute.name} tensorizes with the {want!r} intrinsic, not {intrinsic!r}",
                           op=compute.name)
    cut = st.order.index(loop)
    outer_names, inner_names = st.order[:cut], st.order[cut:]
    inner_axis = {}
    for name in inner_names:
        if name in st.fused or name in st.vthread:
            raise CompileError(f"loop {name!r} is fused or a virtual thread: it must stay outside the "
                               f"tensorized loops", op=compute.name)
        ax = st.axis[name]
        if ax in inner_axis.values():
            raise CompileError(f"axis {ax!r} has two loops inside the tensorized region", op=compute.name)
        if st.stride[name] != 1:
            raise CompileError(f"loop {name!r} is not its axis's innermost part; tensorize inside it",
                               op=compute.name)
        inner_axis[name] = ax
    for t in compute.tensors():
        if t not in st.scopes:
            verb = "cache_write" if t == compute.out.tensor.name else "cache_read"
            raise CompileError(f"tensor {t!r} has no {verb}", op=compute.name)
        if t not in st.placement:
            raise CompileError(f"tensor {t!r} has no dma_copy placement", op=compute.name)
    level = {name: i + 1 for i, name in enumerate(outer_names)}
    for f, (a, b, _) in st.fused.items():
        if f in level:
            level[a] = level[b] = level[f]
    placement = {}
    for t, at in st.placement.items():
        if at != "root" and at not in level:
            where = "is inside the tensorized loops" if at in inner_names else \
                "names a loop a later split or fuse replaced"
            raise CompileError(f"dma_copy({t!r}, {at!r}) {where}", op=compute.name)
        placement[t] = 0 if at == "root" else level[at]
    out_level = placement[compute.out.tensor.name]
    if compute.init is not None and placement[compute.init.tensor.name] != out_level:
        raise CompileError(f"{compute.init.tensor.name!r} initialises the output tile: dma_copy it at "
                           f"the output's loop", op=compute.name)
    for name in outer_names[:out_level]:
        comps = [name] if name not in st.fused else list(st.fused[name][:2])
        if any(compute.axis(st.axis[c]).reduce for c in comps):
            raise CompileError(f"reduction loop {name!r} is outside the output tile: place "
                               f"dma_copy of the output at or above it", op=compute.name)
    parts: dict[str, list[Part]] = {}
    for name in outer_names:
        comps = [name] if name not in st.fused else list(st.fused[name][:2])
        for c in comps:
            parts.setdefault(st.axis[c], []).append(Part(c, st.stride[c]))
    vthread_level = None
    outer = [Loop(n, st.extent[n], n in st.vthread) for n in outer_names]
    for i, lp in enumerate(outer):
        if lp.vthread:
            if vthread_level is not None:
                raise CompileError("only one virtual-thread loop is supported", op=compute.name)
            vthread_level = i
    return LoopNest(compute, outer, [Loop(n, st.extent[n]) for n in inner_names], inner_axis, parts,
                    dict(st.fused), dict(st.scopes), placement, intrinsic, vthread_level)
