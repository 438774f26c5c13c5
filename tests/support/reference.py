"""An independent, deliberately simple reference interpreter for vtakit programs.

Written from ISA.md (and vtakit's clarifications of it) without looking at the
simulators.  Instructions run one at a time in program order, ignoring
dependency tokens (a correctly synchronised program gives the same result), and
the run stops at FINISH, which must be the last instruction.  The configuration's
semantic fields (HwConfig.extensions) decide what STORE reads and which
instructions are refused, as ISA.md describes them.  Every micro-op is a plain Python loop
iteration; numpy only does the lane arithmetic.  Speed is not a goal.

All on-chip values are held as int64 numpy arrays and explicitly wrapped to
their bit width after every operation, so wrapping is visible in one place.
"""

from __future__ import annotations

import numpy as np

from vtakit.errors import SimError
from vtakit.isa import (
    Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Store, Uop, decode_program, decode_uops,
)
from vtakit.isa.fields import INSN_BYTES
from vtakit.isa.image import ProgramImage


def wrap(values: "np.ndarray | int", bits: int) -> np.ndarray:
    """Two's complement wrap of int64 values to a signed `bits`-bit range."""
    half = 1 << (bits - 1)
    return ((np.asarray(values, dtype=np.int64) + half) & ((1 << bits) - 1)) - half


def _lane_format(cfg: HwConfig, mem: MemId) -> tuple[int, tuple[int, int]]:
    """Bits per lane and lane shape of one DRAM element of a data memory type."""
    if mem == MemId.INP:
        return cfg.inp_bits, (cfg.batch, cfg.block_in)
    if mem == MemId.WGT:
        return cfg.wgt_bits, (cfg.block_out, cfg.block_in)
    if mem == MemId.ACC:
        return cfg.acc_bits, (cfg.batch, cfg.block_out)
    if mem == MemId.ACC_8BIT:
        return 8, (cfg.batch, cfg.block_out)
    if mem == MemId.OUT:
        return cfg.out_bits, (cfg.batch, cfg.block_out)
    raise ValueError(f"memory type {mem!r} has no lanes")


class _Machine:
    """On-chip state plus the DRAM it reads and writes."""

    def __init__(self, cfg: HwConfig, dram: np.ndarray):
        self.cfg = cfg
        self.dram = dram
        self.inp = np.zeros((cfg.inp_depth, cfg.batch, cfg.block_in), dtype=np.int64)
        self.wgt = np.zeros((cfg.wgt_depth, cfg.block_out, cfg.block_in), dtype=np.int64)
        self.acc = np.zeros((cfg.acc_depth, cfg.batch, cfg.block_out), dtype=np.int64)
        # What STORE reads when store_from_acc is false: GEMM and ALU results only.
        self.out = np.zeros((cfg.acc_depth, cfg.batch, cfg.block_out), dtype=np.int64)
        self.uop: list[Uop] = [Uop(0, 0, 0)] * cfg.uop_depth
        self.index = 0  # index of the instruction being executed, for error messages

    # ------------------------------------------------------------- errors
    def fail(self, message: str) -> SimError:
        return SimError(f"reference: {message}", insn_index=self.index)

    def check(self, what: str, index: int, size: int) -> None:
        if not 0 <= index < size:
            raise self.fail(f"{what} index {index} outside [0, {size})")

    # --------------------------------------------------------------- DRAM
    def dram_slice(self, mem: MemId, element: int) -> slice:
        """Byte range of DRAM element `element` of memory type `mem`."""
        nbytes = self.cfg.elem_bytes(mem)
        start = element * nbytes
        if element < 0 or start + nbytes > self.dram.size:
            raise self.fail(f"DRAM {mem.name} element {element} outside the {self.dram.size}-byte DRAM")
        return slice(start, start + nbytes)

    def read_dram(self, mem: MemId, element: int) -> "np.ndarray | Uop":
        raw = self.dram[self.dram_slice(mem, element)].tobytes()
        if mem == MemId.UOP:
            return decode_uops(raw, self.cfg)[0]
        bits, shape = _lane_format(self.cfg, mem)
        return np.frombuffer(raw, dtype=f"<i{bits // 8}").reshape(shape).astype(np.int64)

    def write_dram(self, mem: MemId, element: int, lanes: np.ndarray) -> None:
        bits, shape = _lane_format(self.cfg, mem)
        data = wrap(lanes, bits).astype(f"<i{bits // 8}").reshape(shape)
        self.dram[self.dram_slice(mem, element)] = np.frombuffer(data.tobytes(), dtype=np.uint8)

    # --------------------------------------------------------------- SRAM
    def write_sram(self, mem: MemId, index: int, value: "np.ndarray | Uop | None") -> None:
        """Store one element into the buffer of `mem`; None means a zero (padding) element."""
        if mem == MemId.UOP:
            self.check("UOP buffer", index, self.cfg.uop_depth)
            self.uop[index] = Uop(0, 0, 0) if value is None else value
            return
        buffer = {MemId.INP: self.inp, MemId.WGT: self.wgt,
                  MemId.ACC: self.acc, MemId.ACC_8BIT: self.acc}.get(mem)
        if buffer is None:
            raise self.fail(f"LOAD of memory type {mem.name} is not supported")
        self.check(f"{mem.name} buffer", index, len(buffer))
        buffer[index] = 0 if value is None else value  # ACC_8BIT values are already sign-extended

    # -------------------------------------------------------- instructions
    def load(self, insn: Load) -> None:
        mem = MemId(insn.mem)
        pads = (insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1)
        if any(pads) and (insn.x_size == 0 or mem == MemId.UOP
                          or (mem == MemId.WGT and not self.cfg.wgt_load_pad)):
            raise self.fail(f"LOAD.{mem.name} with x_size {insn.x_size} takes no padding here")
        if mem == MemId.UOP and insn.x_size and insn.y_size != 1:
            raise self.fail("LOAD.UOP needs y_size 1")
        if mem == MemId.ACC_8BIT and not self.cfg.acc8_load:
            raise self.fail("LOAD.ACC_8BIT is not in this configuration")
        if insn.x_size == 0:
            return
        rows = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        cols = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        for r in range(rows):
            for c in range(cols):
                y, x = r - insn.y_pad_0, c - insn.x_pad_0
                if 0 <= y < insn.y_size and 0 <= x < insn.x_size:
                    value = self.read_dram(mem, insn.dram_base + y * insn.x_stride + x)
                else:
                    value = None
                self.write_sram(mem, insn.sram_base + r * cols + c, value)

    def store(self, insn: Store) -> None:
        if insn.x_size == 0:
            return
        if MemId(insn.mem) != MemId.OUT:
            raise self.fail(f"STORE of memory type {MemId(insn.mem).name} is not supported")
        if insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1:
            raise self.fail("STORE padding must be zero")
        for y in range(insn.y_size):
            for x in range(insn.x_size):
                src = insn.sram_base + y * insn.x_size + x
                self.check("ACC buffer", src, self.cfg.acc_depth)
                value = self.acc[src] if self.cfg.store_from_acc else self.out[src]
                self.write_dram(MemId.OUT, insn.dram_base + y * insn.x_stride + x, value)

    def micro_ops(self, insn: "Gemm | Alu"):
        """(dst, src, wgt) of every micro-op execution, in loop order."""
        if insn.uop_end > self.cfg.uop_depth:
            raise self.fail(f"uop_end {insn.uop_end} beyond the {self.cfg.uop_depth}-entry UOP buffer")
        wgt_out = getattr(insn, "wgt_factor_out", 0)
        wgt_in = getattr(insn, "wgt_factor_in", 0)
        for o in range(insn.iter_out):
            for i in range(insn.iter_in):
                for u in range(insn.uop_bgn, insn.uop_end):
                    uop = self.uop[u]
                    yield (uop.dst + o * insn.dst_factor_out + i * insn.dst_factor_in,
                           uop.src + o * insn.src_factor_out + i * insn.src_factor_in,
                           uop.wgt + o * wgt_out + i * wgt_in)

    def gemm(self, insn: Gemm) -> None:
        for dst, src, wgt in self.micro_ops(insn):
            self.check("GEMM dst (ACC)", dst, self.cfg.acc_depth)
            if insn.reset and self.cfg.store_from_acc:
                self.acc[dst] = 0
                continue
            self.check("GEMM src (INP)", src, self.cfg.inp_depth)
            self.check("GEMM wgt (WGT)", wgt, self.cfg.wgt_depth)
            product = self.inp[src] @ self.wgt[wgt].T  # (batch, block_out), exact in int64
            total = wrap(self.acc[dst] + product, self.cfg.acc_bits)
            self.out[dst] = wrap(total, self.cfg.out_bits)  # VTA: even a reset writes the sum here
            self.acc[dst] = 0 if insn.reset else total

    def alu(self, insn: Alu) -> None:
        op = AluOp(insn.op)
        if op == AluOp.MUL and not self.cfg.alu_mul and not insn.reset:
            raise self.fail("ALU MUL is not implemented by this configuration (alu_mul is false)")
        if insn.reset and not self.cfg.alu_reset:
            raise self.fail("ALU reset is not in this configuration")
        for dst, src, _ in self.micro_ops(insn):
            self.check("ALU dst (ACC)", dst, self.cfg.acc_depth)
            if insn.reset:
                self.acc[dst] = 0
                self.out[dst] = 0
                continue
            if insn.use_imm:
                b = np.full_like(self.acc[dst], insn.imm)
            else:
                self.check("ALU src (ACC)", src, self.cfg.acc_depth)
                b = self.acc[src].copy()
            self.acc[dst] = alu_op(op, self.acc[dst].copy(), b, self.cfg)
            self.out[dst] = wrap(self.acc[dst], self.cfg.out_bits)

    def run(self, insns: list) -> None:
        for index, insn in enumerate(insns):
            self.index = index
            if isinstance(insn, Finish):
                if index != len(insns) - 1:
                    self.index = index + 1
                    raise self.fail("instructions after FINISH")
                return
            if isinstance(insn, Load):
                self.load(insn)
            elif isinstance(insn, Store):
                self.store(insn)
            elif isinstance(insn, Gemm):
                self.gemm(insn)
            elif isinstance(insn, Alu):
                self.alu(insn)
            else:
                raise self.fail(f"unknown instruction {insn!r}")


def alu_op(op: AluOp, a: np.ndarray, b: np.ndarray, cfg: HwConfig) -> np.ndarray:
    """One ALU operation on int64 lane arrays holding acc_bits-bit signed values."""
    if op == AluOp.MIN:
        return np.minimum(a, b)
    if op == AluOp.MAX:
        return np.maximum(a, b)
    if op == AluOp.ADD:
        return wrap(a + b, cfg.acc_bits)
    if op == AluOp.MUL:
        return wrap(a * b, cfg.acc_bits)  # |a*b| <= 2**62 for 32-bit operands: exact in int64
    if op == AluOp.SHR:
        # The amount is the low shr_arg_bits bits of the operand, read as signed.
        amount = wrap(b & ((1 << cfg.shr_arg_bits) - 1), cfg.shr_arg_bits)
        result = np.empty_like(a)
        for lane in np.ndindex(a.shape):
            n = int(amount[lane])
            value = int(a[lane])
            result[lane] = value >> n if n >= 0 else int(wrap(value << -n, cfg.acc_bits))
        return result
    raise ValueError(f"unknown ALU op {op!r}")


def reference_run(cfg: HwConfig, dram: np.ndarray, insn_addr: int, insn_count: int) -> None:
    """Run a program on the uint8 `dram` array in place, in program order, up to the first FINISH."""
    code = dram[insn_addr:insn_addr + insn_count * INSN_BYTES].tobytes()
    if len(code) != insn_count * INSN_BYTES:
        raise SimError(f"reference: {insn_count} instructions at byte {insn_addr} run past the DRAM")
    _Machine(cfg, dram).run(decode_program(code, cfg))


def reference_image(img: ProgramImage) -> np.ndarray:
    """The final DRAM of a program image (the image itself is left unchanged)."""
    dram = img.dram.copy()
    reference_run(img.config, dram, img.insn_addr, img.insn_count)
    return dram
