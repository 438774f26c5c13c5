"""Tensorize: map the compute of a tile onto the GEMM and ALU intrinsics.

The GEMM intrinsic is one micro-op: acc[dst] += inp[src] x wgt[wgt]^T over a
batch x block_in x block_out element; the ALU intrinsic is acc[dst] =
op(acc[dst], imm or acc[src]) over a batch x block_out element.  A tile's compute
matches when its tensors sit in the scopes those read, and every on-chip address
it touches is affine in the loops inside the tensorize point; the result is an
`IntrinsicCall`: loops plus affine address maps, which `uops` folds into
instructions.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.loopnest import LoopNest
from vtakit.compiler.backends.vta.lowering.steps import LoweringState, LoweringStep, Phase, register_step
from vtakit.compiler.backends.vta.regions import Region, substitute_box
from vtakit.compiler.backends.vta.te import Access
from vtakit.isa.opcodes import AluOp, MemId

_NEEDS = {"gemm": {"data": "inp", "weight": "wgt"}, "alu": {}}


@dataclass(frozen=True)
class IntrinsicCall:
    kind: str                             # "gemm", "reset" or "alu"
    loops: tuple[tuple[str, int], ...]    # (variable, extent), outermost first
    dst: Affine
    src: Affine | None = None
    wgt: Affine | None = None
    op: AluOp | None = None
    imm: int | None = None


def match(nest: LoopNest) -> None:
    """CompileError unless the compute fits its intrinsic."""
    c = nest.compute
    if nest.scopes.get(c.out.tensor.name) != "acc":
        raise CompileError("the output must be computed in the acc scope", op=c.name)
    if c.reduce == "gemm":
        for role, scope in _NEEDS["gemm"].items():
            tensor = getattr(c, role).tensor.name
            if nest.scopes.get(tensor) != scope:
                raise CompileError(f"GEMM reads its {role} from the {scope} scope; {tensor!r} is cached "
                                   f"in {nest.scopes.get(tensor)!r}", op=c.name)
    elif c.reduce == "max" and nest.scopes.get(c.data.tensor.name) != "acc":
        raise CompileError("the ALU reads its operands from the acc scope", op=c.name)
    for s in c.steps:
        if s.operand is None:
            continue
        scope = "wgt" if s.operand.tensor.mem == MemId.WGT and s.op == AluOp.ADD else "acc"  # lowering/bias.py
        if nest.scopes.get(s.operand.tensor.name) != scope:
            raise CompileError(f"ALU operand {s.operand.tensor.name!r} must be cached in {scope}", op=c.name)
    for e in c.out.index:
        if len(e.terms) != 1 or e.terms[0][1] != 1 or e.const:
            raise CompileError("each output dimension must be indexed by one axis", op=c.name)


def _address(access: Access, region: Region, base: int, box, inner: dict[str, str]) -> Affine:
    return region.sram_offset(substitute_box(access, box, inner)) + base


def compute_call(nest: LoopNest, box: dict[str, tuple[int, int]], regions: dict[str, Region],
                 bases: dict[str, int]) -> IntrinsicCall:
    """The intrinsic call computing one tile (`box` at the compute level)."""
    c = nest.compute
    inner = {ax: name for name, ax in nest.inner_axis.items()}
    loops = tuple((name, box[nest.inner_axis[name]][1]) for name in (lp.name for lp in nest.inner))

    def addr(access: Access) -> Affine:
        name = access.tensor.name
        return _address(access, regions[name], bases[name], box, inner)

    if c.reduce == "gemm":
        return IntrinsicCall("gemm", loops, addr(c.out), src=addr(c.data), wgt=addr(c.weight))
    if c.reduce == "max":
        return IntrinsicCall("alu", loops, addr(c.out), src=addr(c.data), op=AluOp.MAX)
    raise CompileError(f"{c.name} has no reduction to compute", op=c.name)  # eltwise: out tile only


def _tile(nest: LoopNest, regions: dict[str, Region], bases: dict[str, int]):
    """Loops over the output tile (one per output dimension) and its on-chip address."""
    out = nest.compute.out.tensor.name
    region = regions[out]
    loops = tuple((f"t{d}", n) for d, n in enumerate(region.count))
    dst = sum((Affine.var(f"t{d}", s) for d, s in enumerate(region.strides)), Affine()) + bases[out]
    return loops, dst


def tile_op(nest: LoopNest, regions: dict[str, Region], bases: dict[str, int], op: AluOp | None,
            imm: int | None = None) -> IntrinsicCall:
    """One ALU operation with an immediate over the whole output tile (op None: a GEMM reset)."""
    loops, dst = _tile(nest, regions, bases)
    if op is None:
        return IntrinsicCall("reset", loops, dst)
    return IntrinsicCall("alu", loops, dst, op=op, imm=imm)


def tile_calls(nest: LoopNest, out_box: dict[str, tuple[int, int]], regions: dict[str, Region],
               bases: dict[str, int], stage: str) -> list[IntrinsicCall]:
    """Calls over the whole output tile: "begin" (reset, or minus infinity for max) or "end"
    (the ALU steps, in order)."""
    c = nest.compute
    if stage == "begin":
        calls = [tile_op(nest, regions, bases, None)]
        if c.reduce == "max":
            calls.append(tile_op(nest, regions, bases, AluOp.MIN, -(1 << 15)))
        return calls
    loops, dst = _tile(nest, regions, bases)
    axes_of_dim = [e.vars[0] for e in c.out.index]
    inner = {ax: f"t{d}" for d, ax in enumerate(axes_of_dim)}
    calls = []
    for step in c.steps:
        if step.operand is None:
            calls.append(IntrinsicCall("alu", loops, dst, op=step.op, imm=step.imm))
        else:
            name = step.operand.tensor.name
            src = _address(step.operand, regions[name], bases[name], out_box, inner)
            calls.append(IntrinsicCall("alu", loops, dst, src=src, op=step.op))
    return calls


def match_step(lowering: LoweringState) -> None:
    """BEFORE the walk: the operator is refused unless its compute fits its intrinsic."""
    match(lowering.nest)


register_step(LoweringStep("tensorize.match", Phase.BEFORE, match_step, order=10,
                           doc="the compute matches the GEMM / ALU intrinsics, or the operator is refused"))
