"""Lowering driver: (operator, schedule) -> a relocatable instruction stream.

Walks the loop nest's statements in program order: DMA planning for transfers,
tensorize + micro-op folding for compute, the resident micro-op cache.  Around
and inside the walk it runs the registered lowering steps of each phase
(`lowering/steps.py`): BEFORE it (the intrinsic match, the on-chip allocation),
on every intrinsic call (CALL), and AFTER it on the whole stream (the micro-op
preload, then the dependency tokens); `lowering.lowering_steps()` lists the order.  DRAM
addresses are relative to each tensor; `CompiledOp.link` adds the tensors' base
addresses once they are placed in a device's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.loopnest import LoopNest, walk
from vtakit.compiler.backends.vta.lowering.dma import Transfer
from vtakit.compiler.backends.vta.lowering import IDENTITY, ONES, POOL_CARRY, POOL_OUT, POOL_ROWS, Fill, Folded, IntrinsicCall, Phase, Record, UopCache, after_pool, added_call, bias_call, compute_call, direct_operands, fold, halo_rows, moved_calls, moves_int8, plan_transfers, pool_calls, pool_tile, pooled_shape, post_calls, stage_name, steps, tile_calls, tile_op, tile_order_reason, tiles_in_place
from vtakit.compiler.backends.vta.lowering.capacity import Allocation
from vtakit.compiler.backends.vta.program import Program, TensorSpec, link_words
from vtakit.compiler.backends.vta.regions import Region, region_of
from vtakit.compiler.backends.vta.te import ComputeDef
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import encode_program, encode_uops, words_from_bytes
from vtakit.isa.insn import Alu, Gemm, Insn, Load, Store
from vtakit.isa.fields import alu_layout, gemm_layout
from vtakit.isa.opcodes import AluOp, MemId

_OUT_PLANE_SHIFT = 8


@dataclass
class CompiledOp:
    """Instructions with tensor-relative DRAM addresses, the micro-op table and tensor specs."""

    name: str
    cfg: HwConfig
    compute: ComputeDef
    insns: list[Insn]
    relocs: dict[str, np.ndarray]
    tensors: dict[str, TensorSpec]
    uop_table: np.ndarray
    uop_loads: int = 0
    notes: dict = field(default_factory=dict)

    @property
    def inputs(self) -> list[str]:
        return [t for t in self.tensors if t not in (self.compute.out.tensor.name, "uops", IDENTITY, ONES)]

    @property
    def output(self) -> str:
        return self.compute.out.tensor.name

    def link(self, bases: dict[str, int]) -> bytes:
        """Instruction bytes with every dram_base made absolute (`bases`: tensor -> byte address)."""
        return link_words(self.cfg, words_from_bytes(encode_program(self.insns, self.cfg)), self.relocs,
                          self.tensors, bases, self.name)

    def program(self) -> Program:
        """The operator as plain data (what a compiled network stores)."""
        return Program(self.name, words_from_bytes(encode_program(self.insns, self.cfg)), dict(self.relocs),
                       dict(self.tensors), np.frombuffer(encode_uops(self.uop_table, self.cfg), np.uint8).copy(),
                       self.output)


class _Lowering:
    def __init__(self, nest: LoopNest, cfg: HwConfig):
        self.nest, self.cfg = nest, cfg
        self.compute = nest.compute
        self.stmts = walk(nest)
        self.uops = UopCache(cfg.uop_depth)
        self.alloc: Allocation  # set by capacity.allocate, a BEFORE step
        for step in steps(Phase.BEFORE):  # lowering/steps.py: the intrinsic match, the on-chip allocation
            step.run(self)
        self.call_steps = steps(Phase.CALL)
        self.records: list[Record] = []
        self.access = {a.tensor.name: a for a in self.compute.accesses()}
        self.resident: dict[tuple[str, int], Region] = {}
        self.out = self.compute.out.tensor.name
        self.direct = set(direct_operands(self.compute, cfg))
        self.identity_loaded = False
        if self.compute.pool is not None:
            tiles = [region_of(self.compute.out, nest.box(s.values, nest.placement[self.out]))
                     for s in self.stmts if s.kind == "out_begin"]
            reason = tile_order_reason(self.compute, tiles)
            if reason:
                raise CompileError(f"this schedule cannot fuse the max pool: {reason}", op=self.compute.name)
            self.halo = halo_rows(self.compute.pool, self.compute.out.tensor.shape[2], [t.lo[2] for t in tiles])
            self.pool_in_place = tiles_in_place(self.compute, tiles)
        self.ones_loaded = False

    # ---------------------------------------------------------------- emit
    def _copy(self, tensor: str, thread: int) -> int:
        return thread if self.alloc.copies[tensor] > 1 else 0

    def _slot(self, tensor: str, thread: int) -> tuple[str, int]:
        owner = self.out if self.compute.init is not None and tensor == self.compute.init.tensor.name \
            else tensor
        return owner, self._copy(owner, thread)

    def _loop_insn(self, call: IntrinsicCall, reads=frozenset(), writes=frozenset()) -> None:
        for step in self.call_steps:  # the CALL steps (lowering/steps.py), then the folding
            call = step.run(self, call)
        self._emit_folded(fold(call), call.kind, call.op, call.imm, reads, writes)

    def _emit_folded(self, f: Folded, kind: str, op, imm, reads, writes) -> None:
        start, dram = self.uops.place(f.kernel)
        n = len(f.kernel)
        if dram is not None:
            self.records.append(Record(Load(MemId.UOP, start, dram, 1, n, n), reloc="uops"))
        fo = f.factors
        common = dict(uop_bgn=start, uop_end=start + n, iter_out=f.iter_out, iter_in=f.iter_in,
                      dst_factor_out=fo["dst"][0], dst_factor_in=fo["dst"][1])
        if kind in ("gemm", "reset"):
            src, wgt = fo.get("src", (0, 0)), fo.get("wgt", (0, 0))
            insn = Gemm(**common, src_factor_out=src[0], src_factor_in=src[1], wgt_factor_out=wgt[0],
                        wgt_factor_in=wgt[1], reset=kind == "reset")
            layout = gemm_layout(self.cfg)
        else:
            src = fo.get("src", (0, 0))
            insn = Alu(op, **common, src_factor_out=src[0], src_factor_in=src[1],
                       use_imm=imm is not None, imm=imm or 0)
            layout = alu_layout(self.cfg)
        for name in ("iter_out", "iter_in", "dst_factor_out", "dst_factor_in", "src_factor_out",
                     "src_factor_in") + (("wgt_factor_out", "wgt_factor_in") if kind != "alu" else ()):
            if getattr(insn, name) > layout[name].max or getattr(insn, name) < 0:
                raise CompileError(f"{name} {getattr(insn, name)} does not fit its {layout[name].width}-bit "
                                   f"field; use smaller tiles", op=self.compute.name)
        self.records.append(Record(insn, frozenset(reads), frozenset(writes)))

    def _transfer(self, tensor: str, region: Region, thread: int, store: bool = False,
                  plane: int = 0) -> None:
        slot = self._slot(tensor, thread)
        base = self.alloc.base[slot]
        spec = self.access[tensor].tensor
        if not store and spec.mem == MemId.ACC_8BIT and moves_int8(self.cfg):
            if tensor in self.direct:  # only the INP tile: the epilogue's GEMM adds it (lowering.move)
                self._load_identity()
                self._load_inp(tensor, region, base, slot)
            else:
                self._move_int8(tensor, region, thread, slot)
            return
        transfers, fills = plan_transfers(region, base, what=f"{self.compute.name}: {tensor}",
                                          allow_pad=not store)
        plane_elems = int(np.prod(spec.shape)) * plane
        for t in transfers:
            fields = (t.sram_base, t.dram_offset + plane_elems, t.y_size, t.x_size, t.x_stride,
                      t.y_pad_0, t.y_pad_1, t.x_pad_0, t.x_pad_1)
            if store:
                self.records.append(Record(Store(MemId.OUT, *fields), reads=frozenset([slot]), reloc=tensor))
            else:
                self.records.append(Record(Load(spec.mem, *fields), writes=frozenset([slot]), reloc=tensor))
        if spec.pad == "min":
            for fl in fills:
                self._fill_min(fl, slot)

    def _move_int8(self, tensor: str, region: Region, thread: int, slot) -> None:
        """The tile as INP, then GEMM reset + identity GEMM into its acc slot (lowering.move)."""
        stage = (stage_name(tensor), self._copy(stage_name(tensor), thread))
        ident = self._load_identity()
        self._load_inp(tensor, region, self.alloc.base[stage], stage)
        reset, gemm = moved_calls(self.alloc.base[slot], self.alloc.base[stage], self.alloc.base[ident], region.size)
        self._loop_insn(reset, writes=[slot])
        self._loop_insn(gemm, reads=[stage, ident], writes=[slot])
        if self.access[tensor].tensor.pad == "min":
            for fl in plan_transfers(region, self.alloc.base[slot], what=f"{self.compute.name}: {tensor}")[1]:
                self._fill_min(fl, slot)

    def _load_identity(self) -> tuple[str, int]:
        """The identity weight block's slot, loaded by the first instruction that needs it."""
        ident = (IDENTITY, 0)
        if not self.identity_loaded:
            self.identity_loaded = True
            self.records.append(Record(Load(MemId.WGT, self.alloc.base[ident], 0, 1, 1, 1),
                                       writes=frozenset([ident]), reloc=IDENTITY))
        return ident

    def _load_ones(self) -> tuple[str, int]:
        """The bias GEMM's `ones` INP entry, loaded by the first instruction that needs it (lowering.bias)."""
        ones = (ONES, 0)
        if not self.ones_loaded:
            self.ones_loaded = True
            self.records.append(Record(Load(MemId.INP, self.alloc.base[ones], 0, 1, 1, 1),
                                       writes=frozenset([ones]), reloc=ONES))
        return ones

    def _load_inp(self, tensor: str, region: Region, base: int, slot) -> None:
        """An int8 tile as INP elements (same bytes as ACC_8BIT ones when block_in == block_out)."""
        for t in plan_transfers(region, base, what=f"{self.compute.name}: {tensor}")[0]:
            self.records.append(Record(Load(MemId.INP, t.sram_base, t.dram_offset, t.y_size, t.x_size, t.x_stride,
                                            t.y_pad_0, t.y_pad_1, t.x_pad_0, t.x_pad_1),
                                       writes=frozenset([slot]), reloc=tensor))

    def _fill_min(self, fl: Fill, slot) -> None:
        kernel = np.array([[fl.base + u, 0, 0] for u in fl.offsets], dtype=np.int64)
        folded = Folded(fl.iters, 1, {"dst": (fl.factor, 0)}, kernel)
        self._emit_folded(folded, "alu", AluOp.MIN, -(1 << 15), (), [slot])

    # ----------------------------------------------------------------- walk
    def lower(self) -> list[Record]:
        nest = self.nest
        for s in self.stmts:
            level = nest.compute_level if s.kind == "compute" else nest.placement[s.tensor]
            box = nest.box(s.values, level)
            if s.kind == "load":
                region = region_of(self.access[s.tensor], box)
                self.resident[(s.tensor, self._copy(s.tensor, s.thread))] = region
                self._transfer(s.tensor, region, s.thread)
            elif s.kind == "out_begin":
                self._out_begin(box, s.thread)
            elif s.kind == "compute":
                self._compute(box, s.thread)
            else:
                self._out_end(box, s.thread)
        records = self.records
        for step in steps(Phase.AFTER):  # lowering/steps.py: the micro-op preload, the dependency tokens
            records = step.run(self, records)
        return records

    def _view(self, thread: int) -> tuple[dict, dict]:
        regions, bases = {}, {}
        for (t, c), region in self.resident.items():
            if c == self._copy(t, thread):
                regions[t] = region
                bases[t] = self.alloc.base[self._slot(t, thread)]
        return regions, bases

    def _out_begin(self, box, thread: int) -> None:
        region = region_of(self.compute.out, box)
        self.resident[(self.out, self._copy(self.out, thread))] = region
        slot = self._slot(self.out, thread)
        if self.compute.init is not None:
            init = self.compute.init
            self._transfer(init.tensor.name, region_of(init, box), thread)
            return
        regions, bases = self._view(thread)
        for call in tile_calls(self.nest, box, regions, bases, "begin"):
            self._loop_insn(call, writes=[slot])

    def _compute(self, box, thread: int) -> None:
        if self.compute.reduce == "none":
            return
        regions, bases = self._view(thread)
        call = compute_call(self.nest, box, regions, bases)
        c = self.compute
        reads = [self._slot(a.tensor.name, thread) for a in (c.data, c.weight) if a is not None]
        self._loop_insn(call, reads=reads, writes=[self._slot(self.out, thread)])

    def _out_end(self, box, thread: int) -> None:
        regions, bases = self._view(thread)
        slot = self._slot(self.out, thread)
        steps = self.compute.steps
        if self.compute.pool is not None:  # the monotone tail runs on the pooled tile (lowering.pool)
            steps = steps[:after_pool(steps)]
        for call, step in zip(tile_calls(self.nest, box, regions, bases, "end"), steps):
            reads = [self._slot(step.operand.tensor.name, thread)] if step.operand is not None else []
            if step.operand is not None and step.operand.tensor.name in self.direct:
                call = added_call(call, self.alloc.base[(IDENTITY, 0)])
                reads.append((IDENTITY, 0))
            elif step.operand is not None and step.operand.tensor.mem == MemId.WGT:  # the bias as a GEMM
                ones = self._load_ones()
                call = bias_call(call, self.alloc.base[ones])
                reads.append(ones)
            self._loop_insn(call, reads=reads, writes=[slot])
        region = regions[self.out]
        if self.compute.pool is not None:
            self._pool(region, bases[self.out], slot, thread)
            return
        for plane in range(self.compute.out_planes):
            if plane:  # int32 results leave as bytes: shift the next byte down, store it
                shift = tile_op(self.nest, regions, bases, AluOp.SHR, _OUT_PLANE_SHIFT)
                self._loop_insn(shift, writes=[slot])
            self._transfer(self.out, region, thread, store=True, plane=plane)

    def _pool(self, region: Region, base: int, slot, thread: int) -> None:
        """The fused max pool over the tile, the epilogue's tail over the pooled tile, then its store
        (lowering.pool): from POOL_OUT in one transfer, or row by row from the tile when pooled in place."""
        c = self.compute
        out = slot if self.pool_in_place else (POOL_OUT, self._copy(POOL_OUT, thread))
        t = pool_tile(c, region, self.halo, self.pool_in_place, base, self.alloc.base[(POOL_ROWS, 0)],
                      self.alloc.base[out] if not self.pool_in_place else 0, self.alloc.base[(POOL_CARRY, 0)])
        slots = {"tile": slot, POOL_ROWS: (POOL_ROWS, 0), POOL_OUT: out, POOL_CARRY: (POOL_CARRY, 0)}
        for call, src, dst in pool_calls(c, t):
            self._loop_insn(call, reads=[slots[src]] if src else [], writes=[slots[dst]])
        if t.i1 == t.i0:
            return
        regions, bases = self._view(thread)
        tail = c.steps[after_pool(c.steps):]
        operands = {name: (regions[name], bases[name]) for name in {s.operand.tensor.name for s in tail if s.operand}}
        for call, step in post_calls(c, t, tail, operands):
            reads = [self._slot(step.operand.tensor.name, thread)] if step.operand is not None else []
            self._loop_insn(call, reads=reads, writes=[out])
        if not self.pool_in_place:
            transfers = plan_transfers(t.store_region(c), self.alloc.base[out], what=f"{c.name}: out",
                                       allow_pad=False)[0]
        else:
            _, ocb, ph, pw = pooled_shape(c)
            at = t.out_at(c)
            transfers = [Transfer(at.eval({"n": n, "c": k, "i": i, "j": 0}),
                                  (((t.n0 + n) * ocb + t.c0 + k) * ph + t.i0 + i) * pw, 1, pw, pw)
                         for n in range(t.nn) for k in range(t.nc) for i in range(t.i1 - t.i0)]
        for tr in transfers:
            self.records.append(Record(Store(MemId.OUT, tr.sram_base, tr.dram_offset, tr.y_size, tr.x_size,
                                             tr.x_stride, tr.y_pad_0, tr.y_pad_1, tr.x_pad_0, tr.x_pad_1),
                                       reads=frozenset([out]), reloc=self.out))

def lower(nest: LoopNest, cfg: HwConfig, name: str | None = None) -> CompiledOp:
    """Compile a scheduled operator into a relocatable instruction stream."""
    low = _Lowering(nest, cfg)
    records = low.lower()
    relocs: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        if r.reloc is not None:
            relocs.setdefault(r.reloc, []).append(i)
    compute = nest.compute
    tensors = {t.name: TensorSpec(t.name, t.shape, t.mem,
                                  compute.out_planes if t.name == compute.out.tensor.name else 1)
               for t in compute.tensors().values()}
    if compute.pool is not None:  # what leaves is the pooled tile
        tensors[compute.out.tensor.name] = TensorSpec(compute.out.tensor.name, pooled_shape(compute), MemId.OUT)
    if IDENTITY in relocs:
        tensors[IDENTITY] = TensorSpec(IDENTITY, (1,), MemId.WGT)
    if ONES in relocs:
        tensors[ONES] = TensorSpec(ONES, (1,), MemId.INP)
    table = low.uops.dram_table()
    tensors["uops"] = TensorSpec("uops", (len(table),), MemId.UOP)
    uop_loads = sum(isinstance(r.insn, Load) and r.insn.mem == MemId.UOP for r in records)
    return CompiledOp(name or compute.name, cfg, compute, [r.insn for r in records],
                      {k: np.array(v, dtype=np.int64) for k, v in relocs.items()}, tensors, table,
                      uop_loads, {"alloc": low.alloc.used, "kernels": len(low.uops.words)})
