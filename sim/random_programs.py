"""Random, correctly synchronized programs for differential testing.

Each program is a sequence of tasks.  Task k uses half k % 2 of every on-chip
buffer (double buffering, as compilers do): the load module fills its input and
weight halves, the compute module loads micro-ops and accumulators, runs
GEMMs and ALU operations with random loop nests (including the hazards the ISA
must resolve: repeated destinations, reads of entries written earlier in the
same instruction), and the store module writes parts of the accumulator half to
DRAM.  Only instructions the configuration defines are generated (no WGT
padding, ACC_8BIT loads or ALU resets where its fields leave them out).  Tokens order every cross-module reuse of a half, so executing the
instructions in program order gives the one correct result, whatever the timing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vtakit.isa.config import HwConfig
from vtakit.isa.insn import Alu, Gemm, Insn, Load, Store
from vtakit.isa.opcodes import AluOp, MemId
from vtakit.isa.image import ProgramBuilder, ProgramImage

_HALF_CAP = 48      # entries of each buffer half a task uses (keeps references fast)
_POOL = 96          # DRAM elements per memory type that loads read from


class _Task:
    """Random choices for one task, bounded to the halves it owns."""

    def __init__(self, cfg: HwConfig, rng: np.random.Generator, half: int):
        self.cfg, self.rng = cfg, rng
        self.inp = min(cfg.inp_depth // 2, _HALF_CAP)
        self.wgt = min(cfg.wgt_depth // 2, _HALF_CAP)
        self.acc = min(cfg.acc_depth // 2, _HALF_CAP)
        self.inp_base = half * (cfg.inp_depth // 2)
        self.wgt_base = half * (cfg.wgt_depth // 2)
        self.acc_base = half * (cfg.acc_depth // 2)
        self.uops: list[tuple[int, int, int]] = []

    def load_2d(self, mem: MemId, pool_addr: int, room: int, **deps) -> Load:
        """A LOAD of a random window of the pool, padded, somewhere in `room` entries."""
        rng = self.rng
        while True:
            y, x = int(rng.integers(0, 4)), int(rng.integers(1, 6))
            padded = rng.random() < 0.6 and (mem != MemId.WGT or self.cfg.wgt_load_pad)
            pads = [int(v) for v in rng.integers(0, 3, 4)] if padded else [0, 0, 0, 0]
            total = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
            if 0 < total <= room:
                break
        stride = x + int(rng.integers(0, 4))
        span = max(0, (y - 1) * stride + x)
        dram = pool_addr + int(rng.integers(0, _POOL - span + 1))
        base = {MemId.INP: self.inp_base, MemId.WGT: self.wgt_base}.get(mem, self.acc_base)
        sram = base + int(rng.integers(0, room - total + 1))
        return Load(mem, sram, dram, y, x, stride, *pads, **deps)

    def loop(self, spans: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
        """Random loop extents and factors keeping each index below its span."""
        rng = self.rng
        it_out, it_in = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        factors, room = {}, {}
        for name, span in spans.items():
            f_out = int(rng.integers(0, 3)) if it_out > 1 else int(rng.integers(0, 2))
            f_in = int(rng.integers(0, 3)) if it_in > 1 else 0
            reach = (it_out - 1) * f_out + (it_in - 1) * f_in
            if reach >= span:
                f_out = f_in = reach = 0
            factors[f"{name}_factor_out"], factors[f"{name}_factor_in"] = f_out, f_in
            room[name] = span - reach
        return {"iter_out": it_out, "iter_in": it_in, **factors}, room

    def add_uops(self, count: int, dst_room: int, src_room: int, src_base: int,
                 wgt_room: int = 1, repeat_dst: bool = False) -> tuple[int, int]:
        """Append micro-ops (indices relative to the halves); returns their range in the task's list."""
        rng = self.rng
        start = len(self.uops)
        for _ in range(count):
            dst = int(rng.integers(0, dst_room))
            if repeat_dst and self.uops[start:] and rng.random() < 0.5:
                dst = self.uops[-1][0] - self.acc_base
            self.uops.append((self.acc_base + dst, src_base + int(rng.integers(0, src_room)),
                              self.wgt_base + int(rng.integers(0, wgt_room))))
        return start, len(self.uops)

    def gemm(self, reset: bool) -> Gemm:
        spans = {"dst": self.acc, "src": self.inp, "wgt": self.wgt}
        loop, room = self.loop(spans)
        bgn, end = self.add_uops(int(self.rng.integers(1, 6)), room["dst"], room["src"],
                                 self.inp_base, room["wgt"], repeat_dst=True)
        return Gemm(bgn, end, reset=reset, **loop)

    def alu(self) -> Alu:
        rng = self.rng
        ops = [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR] + ([AluOp.MUL] if self.cfg.alu_mul else [])
        op = ops[int(rng.integers(0, len(ops)))]
        use_imm = bool(rng.random() < 0.5)
        loop, room = self.loop({"dst": self.acc, "src": self.acc})
        bgn, end = self.add_uops(int(rng.integers(1, 6)), room["dst"], room["src"], self.acc_base,
                                 repeat_dst=True)
        if op == AluOp.SHR:
            imm = int(rng.integers(-40, 41))
        elif op == AluOp.MUL:
            imm = int(rng.integers(-300, 301))
        else:
            imm = int(rng.integers(-(1 << 15), 1 << 15))
        return Alu(op, bgn, end, use_imm=use_imm, imm=imm if use_imm else 0,
                   reset=self.cfg.alu_reset and bool(rng.random() < 0.05), **loop)


def random_program(cfg: HwConfig, seed: int, tasks: int | None = None) -> ProgramImage:
    """A random synchronized program; same (cfg, seed) gives the same image."""
    rng = np.random.default_rng(seed)
    tasks = int(rng.integers(1, 5)) if tasks is None else tasks
    b = ProgramBuilder(cfg, name=f"random seed {seed}")
    pools = {}
    for mem in (MemId.INP, MemId.WGT, MemId.ACC, MemId.ACC_8BIT):
        eb = cfg.elem_bytes(mem)
        if mem == MemId.ACC:  # accumulators: mostly small values, some near the int32 limits
            vals = rng.integers(-(1 << 20), 1 << 20, _POOL * eb // 4, dtype=np.int64)
            vals[rng.random(vals.size) < 0.05] = rng.choice([-(1 << 31), (1 << 31) - 1, -1, 1 << 30])
            data = vals.astype(np.int32).view(np.uint8)
        else:
            data = rng.integers(0, 256, _POOL * eb, dtype=np.uint8)
        pools[mem] = b.place_elems(mem, data)

    half_uops = cfg.uop_depth // 2
    for k in range(tasks):
        t = _Task(cfg, rng, k % 2)
        # --- load module
        loads = [t.load_2d(MemId.INP, pools[MemId.INP], t.inp) for _ in range(int(rng.integers(1, 3)))]
        loads += [t.load_2d(MemId.WGT, pools[MemId.WGT], t.wgt) for _ in range(int(rng.integers(0, 3)))]
        if rng.random() < 0.2:
            loads.append(Load(MemId.INP, 0, 0, 0, 0, 0))  # x_size 0: a no-op
        loads[0] = _with(loads[0], pop_next=k >= 2)
        loads[-1] = _with(loads[-1], push_next=True)
        b.emit(*loads)
        # --- compute module
        body: list[Insn] = []
        if rng.random() < 0.5:
            mem = MemId.ACC if rng.random() < 0.5 or not cfg.acc8_load else MemId.ACC_8BIT
            body.append(t.load_2d(mem, pools[mem], t.acc))
        body.append(t.gemm(reset=True))
        for _ in range(int(rng.integers(1, 4))):
            body.append(t.gemm(reset=False))
        for _ in range(int(rng.integers(1, 5))):
            body.append(t.alu())
        if rng.random() < 0.2:
            body.append(Gemm(0, 0))  # no micro-ops: a no-op
        uop_base = (k % 2) * half_uops
        body = [_shift_uops(insn, uop_base) for insn in body]
        uop_addr = b.place_uops(np.array(t.uops, dtype=np.int64).reshape(-1, 3))
        n = len(t.uops)
        head = Load(MemId.UOP, uop_base, uop_addr, 1, n, n, pop_prev=True, pop_next=k >= 2)
        body[-1] = _with(body[-1], push_prev=True, push_next=True)
        b.emit(head, *body)
        # --- store module
        stores = []
        for _ in range(int(rng.integers(1, 3))):
            y, x = int(rng.integers(1, 4)), int(rng.integers(1, 5))
            stride = x + int(rng.integers(-1 if y > 1 and x > 1 else 0, 3))
            sram = t.acc_base + int(rng.integers(0, t.acc - y * x + 1))
            out_elems = (y - 1) * stride + x
            dst = b.reserve_elems(MemId.OUT, out_elems, name=f"out{k}_{len(stores)}",
                                  shape=(out_elems * cfg.elem_bytes(MemId.OUT),), dtype="|i1")
            stores.append(Store(MemId.OUT, sram, dst, y, x, stride))
        stores[0] = _with(stores[0], pop_prev=True)
        stores[-1] = _with(stores[-1], push_prev=True)
        b.emit(*stores)
    # The last two tasks' buffer releases are still queued.
    b.finish(load_pops=min(tasks, 2), compute_pops=min(tasks, 2))
    return b.build()


def _with(insn: Insn, **changes) -> Insn:
    return replace(insn, **changes)


def _shift_uops(insn: Insn, base: int) -> Insn:
    if isinstance(insn, (Gemm, Alu)) and insn.uop_end > insn.uop_bgn:
        return _with(insn, uop_bgn=insn.uop_bgn + base, uop_end=insn.uop_end + base)
    return insn
