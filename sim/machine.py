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
from vtakit.sim.kernels import GemmKernel, alu_run, loop_chunks, loop_indices, loop_max
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
        # Float mirrors of the GEMM operands, kept in step by every load.
        self.inp_f = np.zeros(self.inp.shape, dtype=self._gemm.float_dtype)
        self.wgt_f = np.zeros(self.wgt.shape, dtype=self._gemm.float_dtype)
        # Per memory type, indexed by mem_id: hot-path lookups without enum calls.
        self._elem_bytes = [cfg.elem_bytes(m) for m in MemId]
        self._depth = [cfg.depth(m) for m in MemId]
        self.tokens = [0, 0, 0, 0]
        """Tokens waiting in the four dependency queues (see decoded.QUEUE_NAMES)."""
        self.deadline: float | None = None
        """time.monotonic() after which a long instruction gives up (DeviceTimeout)."""

    # ----------------------------------------------------------------- dispatch
    def execute(self, prog: DecodedProgram, i: int, counters: Counters) -> None:
        args = prog.args[i]
        op = args[0]
        try:
            if op == Opcode.LOAD:
                self._load(args, counters)
            elif op == Opcode.STORE:
                self._store(args, counters)
            elif op == Opcode.GEMM:
                self._gemm_insn(args, counters)
            elif op == Opcode.ALU:
                self._alu_insn(args, counters)
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
        base = self.dram[start:end]
        if stride == x or y == 1:
            return base.reshape(y, x * eb)
        return as_strided(base, shape=(y, x * eb), strides=(stride * eb, 1), writeable=writeable)

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
        if y > 0:
            raw = np.ascontiguousarray(self._dram_rows(mem, dram_base, y, x, stride, False))
            counters.read(mem, raw.size)
        padded = total != y * x
        for target, data in self._load_targets(mem, raw, y, x):
            block = target[sram:sram + total].reshape((rows, cols) + target.shape[1:])
            if padded:
                block[...] = 0
            if data is not None:
                block[yp0:yp0 + y, xp0:xp0 + x] = data
        if mem == MemId.INP:
            self.inp_f[sram:sram + total] = self.inp[sram:sram + total]
        elif mem == MemId.WGT:
            self.wgt_f[sram:sram + total] = self.wgt[sram:sram + total]

    def _load_targets(self, mem: int, raw: np.ndarray | None, y: int, x: int):
        """(buffer, data shaped (y, x, *element)) pairs a LOAD writes."""
        cfg = self.cfg
        if mem == MemId.UOP:
            cols = uop_columns(raw.view("<u4").reshape(y, x), cfg) if raw is not None else (None,) * 3
            return list(zip((self.uop_dst, self.uop_src, self.uop_wgt), cols))
        target, dtype = {
            MemId.INP: (self.inp, cfg.inp_dtype), MemId.WGT: (self.wgt, cfg.wgt_dtype),
            MemId.ACC: (self.acc, cfg.acc_dtype), MemId.ACC_8BIT: (self.acc, np.dtype(np.int8)),
        }[MemId(mem)]
        data = None
        if raw is not None:  # ACC_8BIT: one signed byte per lane, sign-extended on assignment
            data = raw.view(dtype.newbyteorder("<")).reshape((y, x) + target.shape[1:])
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
    def _uop_range(self, bgn: int, end: int):
        return self.uop_dst[bgn:end], self.uop_src[bgn:end], self.uop_wgt[bgn:end]

    def _gemm_insn(self, args, counters: Counters) -> None:
        (_, reset, bgn, end, it_out, it_in, dfo, dfi, sfo, sfi, wfo, wfi) = args
        if end <= bgn or it_out == 0 or it_in == 0:
            return
        cfg = self.cfg
        d0, s0, w0 = self._uop_range(bgn, end)
        _check_range(d0, it_out, it_in, dfo, dfi, cfg.acc_depth, "dst", "accumulator")
        if not reset or self.out is not None:  # VTA's reset GEMM still reads its operands
            _check_range(s0, it_out, it_in, sfo, sfi, cfg.inp_depth, "src", "input")
            _check_range(w0, it_out, it_in, wfo, wfi, cfg.wgt_depth, "wgt", "weight")
        for o0, n_out, i0, n_in in loop_chunks(it_out, it_in, end - bgn):
            self._check_deadline()
            dst = loop_indices(d0 + (o0 * dfo + i0 * dfi), n_out, n_in, dfo, dfi)
            if reset and self.out is None:
                self.acc[dst] = 0
                counters.gemm_reset_uops += dst.size
                continue
            src = loop_indices(s0 + (o0 * sfo + i0 * sfi), n_out, n_in, sfo, sfi)
            wgt = loop_indices(w0 + (o0 * wfo + i0 * wfi), n_out, n_in, wfo, wfi)
            if reset:
                entries, values = self._gemm.reset_outputs(self.acc, self.inp_f, self.wgt_f, dst, src, wgt,
                                                           self.out.dtype)
                self.out[entries] = values
                self.acc[dst] = 0
                counters.gemm_reset_uops += dst.size
                continue
            self._gemm.accumulate(self.acc, self.inp_f, self.wgt_f, dst, src, wgt)
            if self.out is not None:
                self.out[dst] = self.acc[dst]  # numpy's integer cast keeps the low bits
            counters.gemm_uops += dst.size

    def _alu_insn(self, args, counters: Counters) -> None:
        (_, reset, bgn, end, it_out, it_in, dfo, dfi, sfo, sfi, op, use_imm, imm) = args
        if end <= bgn or it_out == 0 or it_in == 0:
            return
        cfg = self.cfg
        d0, s0, _ = self._uop_range(bgn, end)
        _check_range(d0, it_out, it_in, dfo, dfi, cfg.acc_depth, "dst", "accumulator")
        tensor = not reset and not use_imm
        if tensor:
            _check_range(s0, it_out, it_in, sfo, sfi, cfg.acc_depth, "src", "accumulator")
        acc2d = self.acc.reshape(cfg.acc_depth, -1)
        # Chunks run in loop order, so the sequential semantics carry across them.
        for o0, n_out, i0, n_in in loop_chunks(it_out, it_in, end - bgn):
            self._check_deadline()
            dst = loop_indices(d0 + (o0 * dfo + i0 * dfi), n_out, n_in, dfo, dfi)
            counters.alu_uops += dst.size
            if reset:
                acc2d[dst] = 0
            else:
                src = loop_indices(s0 + (o0 * sfo + i0 * sfi), n_out, n_in, sfo, sfi) if tensor else None
                alu_run(acc2d, op, dst, src, imm, cfg.shr_arg_bits)
            if self.out is not None:
                self.out[dst] = self.acc[dst]

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeviceTimeout("simulation exceeded its time limit inside one instruction")


class _Fault(Exception):
    """Internal: an access fault, turned into a SimError with the instruction index."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.message = message
        self.field = field


def _check_range(base: np.ndarray, it_out: int, it_in: int, f_out: int, f_in: int,
                 depth: int, what: str, buffer: str) -> None:
    top = loop_max(base, it_out, it_in, f_out, f_in)
    if top >= depth:
        raise _Fault(f"micro-op {what} index reaches {top}, beyond the {buffer} buffer's "
                     f"{depth} entries", f"uop.{what}")
