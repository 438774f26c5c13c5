"""The accelerator's architectural state and the data semantics of each instruction.

`Machine` owns the on-chip buffers (micro-op, input, weight, accumulator, and
VTA's separate output buffer unless the configuration's STORE reads the
accumulator), the dependency-token counts and a reference to DRAM.  Both simulators drive the same
`Machine`; they differ only in *when* they call `execute`, so their results
cannot drift apart.  Out-of-range accesses raise SimError naming the
instruction and field, before any state changes.
"""

from __future__ import annotations

import time

import numpy as np
from numpy.lib.stride_tricks import as_strided

from vtakit.errors import DeviceTimeout, SimError
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import uop_columns
from vtakit.isa.opcodes import MemId, Opcode
from vtakit.sim.decoded import DecodedProgram
from vtakit.sim.kernels import GemmKernel, alu_run
from vtakit.sim.plans import PlanCache, alu_plan, gemm_plan
from vtakit.sim.stats import Counters


class Machine:
    """On-chip state of one accelerator; persists across runs like the hardware's."""

    def __init__(self, cfg: HwConfig, dram: np.ndarray):
        self.cfg = cfg
        self.dram = dram
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        self.inp = np.zeros((cfg.inp_depth, b, bi), dtype=cfg.inp_dtype)
        self.wgt = np.zeros((cfg.wgt_depth, bo, bi), dtype=cfg.wgt_dtype)
        self.acc = np.zeros((cfg.acc_depth, b, bo), dtype=cfg.acc_dtype)
        # VTA's separate output buffer (store_from_acc false): written by GEMM and ALU only.
        self.out = None if cfg.store_from_acc else np.zeros((cfg.acc_depth, b, bo), dtype=cfg.out_dtype)
        self.uop_dst = np.zeros(cfg.uop_depth, dtype=np.int64)
        self.uop_src = np.zeros(cfg.uop_depth, dtype=np.int64)
        self.uop_wgt = np.zeros(cfg.uop_depth, dtype=np.int64)
        self._gemm = GemmKernel(cfg)
        self.plans = PlanCache()
        """Index plans of GEMM/ALU instructions by micro-op contents and loop fields (plans.py)."""
        # Float mirrors of the GEMM operands, kept in step by every load.
        self.inp_f = np.zeros(self.inp.shape, dtype=self._gemm.float_dtype)
        self.wgt_f = np.zeros(self.wgt.shape, dtype=self._gemm.float_dtype)
        # Per memory type, indexed by mem_id: hot-path lookups without enum calls.
        self._elem_bytes = [cfg.elem_bytes(m) for m in MemId]
        self._depth = [cfg.depth(m) for m in MemId]
        self._acc2d = self.acc.reshape(cfg.acc_depth, -1)
        self._shr_bits = cfg.shr_arg_bits
        le = {MemId.INP: (self.inp, cfg.inp_dtype), MemId.WGT: (self.wgt, cfg.wgt_dtype),
              MemId.ACC: (self.acc, cfg.acc_dtype), MemId.ACC_8BIT: (self.acc, np.dtype(np.int8))}
        self._targets = {m: (buf, dtype.newbyteorder("<")) for m, (buf, dtype) in le.items()}
        self._mirror = [(self.inp_f, self.inp) if m == MemId.INP else (self.wgt_f, self.wgt) if m == MemId.WGT
                        else None for m in MemId]
        self._run = {int(Opcode.LOAD): self._load, int(Opcode.STORE): self._store, int(Opcode.GEMM): self._gemm_insn,
                     int(Opcode.ALU): self._alu_insn}
        self.tokens = [0, 0, 0, 0]
        """Tokens waiting in the four dependency queues (see decoded.QUEUE_NAMES)."""
        self.deadline: float | None = None
        """time.monotonic() after which a long instruction gives up (DeviceTimeout)."""

    # ----------------------------------------------------------------- dispatch
    def execute(self, prog: DecodedProgram, i: int, counters: Counters) -> None:
        args = prog.args[i]
        run = self._run.get(args[0])  # FINISH: nothing to do
        try:
            if run is not None:
                run(args, counters)
        except _Fault as fault:
            raise SimError(fault.message, insn_index=i, field=fault.field,
                           mnemonic=prog.mnemonic(i)) from None
        counters.insns += 1

    # ------------------------------------------------------------- load/store
    def _dram_rows(self, mem: int, dram_base: int, y: int, x: int, stride: int, writeable: bool):
        """A (y, x * elem_bytes) byte view of the DRAM rows an instruction touches."""
        eb = self._elem_bytes[mem]
        start = dram_base * eb
        end = start + ((y - 1) * stride + x) * eb
        if end > self.dram.size:
            raise _Fault(f"DRAM bytes [{start:#x}, {end:#x}) run past the end of DRAM "
                         f"({self.dram.size:#x} bytes)", "dram_base")
        if stride == x or y == 1:
            return self.dram[start:end].reshape(y, x * eb)
        if stride > x and start + y * stride * eb <= self.dram.size:  # a plain view: cheaper than as_strided
            return self.dram[start:start + y * stride * eb].reshape(y, stride * eb)[:, :x * eb]
        return as_strided(self.dram[start:end], shape=(y, x * eb), strides=(stride * eb, 1), writeable=writeable)

    def _load(self, args, counters: Counters) -> None:
        _, mem, sram, dram_base, y, x, stride, yp0, yp1, xp0, xp1 = args
        if x == 0:
            return
        rows, cols = yp0 + y + yp1, xp0 + x + xp1
        total = rows * cols
        depth = self._depth[mem]
        if sram + total > depth:
            raise _Fault(f"writes {MemId(mem).name} buffer entries [{sram}, {sram + total}), "
                         f"beyond its {depth} entries", "sram_base")
        raw = None
        if y > 0:  # rows may be strided in DRAM; each row is contiguous, so it views as elements
            raw = self._dram_rows(mem, dram_base, y, x, stride, False)
            counters.read(mem, raw.size)
        padded = total != y * x
        for target, data in self._load_targets(mem, raw, y, x):
            block = target[sram:sram + total].reshape((rows, cols) + target.shape[1:])
            if padded:
                block[...] = 0
            if data is not None:
                block[yp0:yp0 + y, xp0:xp0 + x] = data
        mirror = self._mirror[mem]
        if mirror is not None:
            mirror[0][sram:sram + total] = mirror[1][sram:sram + total]

    def _load_targets(self, mem: int, raw: np.ndarray | None, y: int, x: int):
        """(buffer, data shaped (y, x, *element)) pairs a LOAD writes."""
        if mem == MemId.UOP:
            cols = uop_columns(raw.view("<u4"), self.cfg) if raw is not None else (None,) * 3
            return list(zip((self.uop_dst, self.uop_src, self.uop_wgt), cols))
        target, dtype = self._targets[mem]
        data = None
        if raw is not None:  # ACC_8BIT: one signed byte per lane, sign-extended on assignment
            data = raw.view(dtype).reshape((y, x) + target.shape[1:])
        return [(target, data)]

    def _store(self, args, counters: Counters) -> None:
        _, mem, sram, dram_base, y, x, stride, *_ = args
        if x == 0 or y == 0:
            return
        cfg = self.cfg
        total = y * x
        if sram + total > cfg.acc_depth:
            raise _Fault(f"reads accumulator entries [{sram}, {sram + total}), beyond its "
                         f"{cfg.acc_depth} entries", "sram_base")
        source = self.acc if self.out is None else self.out
        out = source[sram:sram + total].astype(cfg.out_dtype.newbyteorder("<"))
        rows = out.view(np.uint8).reshape(y, x * self._elem_bytes[MemId.OUT])
        view = self._dram_rows(mem, dram_base, y, x, stride, True)
        if stride >= x or y == 1:
            view[...] = rows
        else:  # overlapping rows: later rows win, in order
            for r in range(y):
                view[r] = rows[r]
        counters.wrote(mem, rows.size)

    # --------------------------------------------------------------- compute
    def _gemm_insn(self, args, counters: Counters) -> None:
        (_, reset, bgn, end, it_out, it_in, dfo, dfi, sfo, sfi, wfo, wfi) = args
        if end <= bgn or it_out == 0 or it_in == 0:
            return
        d0, s0, w0 = self.uop_dst[bgn:end], self.uop_src[bgn:end], self.uop_wgt[bgn:end]
        out = self.out
        key = (True, reset, d0.tobytes(), s0.tobytes(), w0.tobytes(), it_out, it_in, dfo, dfi, sfo, sfi, wfo, wfi)
        plan = self.plans.get(key, lambda: gemm_plan(d0, s0, w0, it_out, it_in, dfo, dfi, sfo, sfi, wfo, wfi,
                                                     bool(reset), out is not None))
        top_d, top_s, top_w = plan.tops
        depth = self._depth
        _check_top(top_d, depth[MemId.ACC], "dst", "accumulator")
        if not reset or out is not None:  # VTA's reset GEMM still reads its operands
            _check_top(top_s, depth[MemId.INP], "src", "input")
            _check_top(top_w, depth[MemId.WGT], "wgt", "weight")
        acc, kernel = self.acc, self._gemm
        for chunk in plan.chunks:
            self._check_deadline()
            if reset:
                if out is not None:
                    rp = chunk.reset
                    out[rp.entries] = kernel.reset_outputs(acc, self.inp_f, self.wgt_f, rp, out.dtype)
                acc[chunk.touched] = 0
                counters.gemm_reset_uops += chunk.n
                continue
            kernel.accumulate(acc, self.inp_f, self.wgt_f, chunk.dst, chunk.src, chunk.wgt, chunk.blocks)
            if out is not None:
                out[chunk.touched] = acc[chunk.touched]  # numpy's integer cast keeps the low bits
            counters.gemm_uops += chunk.n

    def _alu_insn(self, args, counters: Counters) -> None:
        (_, reset, bgn, end, it_out, it_in, dfo, dfi, sfo, sfi, op, use_imm, imm) = args
        if end <= bgn or it_out == 0 or it_in == 0:
            return
        d0, s0 = self.uop_dst[bgn:end], self.uop_src[bgn:end]
        tensor = not reset and not use_imm
        depth = self._depth[MemId.ACC]
        key = (False, tensor, d0.tobytes(), s0.tobytes() if tensor else b"", it_out, it_in, dfo, dfi, sfo, sfi)
        plan = self.plans.get(key, lambda: alu_plan(d0, s0, it_out, it_in, dfo, dfi, sfo, sfi, tensor, depth))
        _check_top(plan.tops[0], depth, "dst", "accumulator")
        if tensor:
            _check_top(plan.tops[1], depth, "src", "accumulator")
        acc2d, shr_bits = self._acc2d, self._shr_bits
        # Chunks run in loop order, so the sequential semantics carry across them.
        for chunk in plan.chunks:
            self._check_deadline()
            counters.alu_uops += chunk.n
            if reset:
                acc2d[chunk.touched] = 0
            else:
                alu_run(acc2d, op, chunk, imm, shr_bits)
            if self.out is not None:
                self.out[chunk.touched] = self.acc[chunk.touched]

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeviceTimeout("simulation exceeded its time limit inside one instruction")


class _Fault(Exception):
    """Internal: an access fault, turned into a SimError with the instruction index."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.message = message
        self.field = field


def _check_top(top: int, depth: int, what: str, buffer: str) -> None:
    if top >= depth:
        raise _Fault(f"micro-op {what} index reaches {top}, beyond the {buffer} buffer's "
                     f"{depth} entries", f"uop.{what}")
