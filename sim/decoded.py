"""A program as the simulators see it: decoded once, validated, in columns.

Decoding happens for all instructions at once with numpy (the fetch module's
view); everything that can be checked without running (opcodes, memory types,
dependency flags per module, store padding, instructions VTA's hardware would run
differently from what they ask for) is checked here and reported as a
SimError naming the instruction.  Checks that depend on data (micro-op indices)
happen when the instruction executes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from vtakit.errors import SimError
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import extract, words_from_bytes
from vtakit.isa.fields import INSN_BYTES, alu_layout, gemm_layout, mem_layout
from vtakit.isa.opcodes import MEM_MNEMONIC, AluOp, MemId, Module, Opcode
from vtakit.sim.stats import Counters

# Token queues, named by direction.
L2C, C2L, C2S, S2C = range(4)
QUEUE_NAMES = ("load->compute", "compute->load", "compute->store", "store->compute")

_MEM_FIELDS = ("mem_id", "sram_base", "dram_base", "y_size", "x_size", "x_stride",
               "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")
_LOOP_FIELDS = ("reset", "uop_bgn", "uop_end", "iter_out", "iter_in",
                "dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in")


@dataclass
class DecodedProgram:
    """Columns of a program plus per-instruction argument tuples for the executor."""

    cfg: HwConfig
    n: int
    opcode: np.ndarray
    module: np.ndarray
    mem: dict[str, np.ndarray]
    gemm: dict[str, np.ndarray]
    alu: dict[str, np.ndarray]
    pops: list[tuple[int, ...]]
    pushes: list[tuple[int, ...]]
    args: list[tuple[int, ...]]
    """Per instruction: opcode first, then the fields its executor needs."""

    def mnemonic(self, i: int) -> str:
        op = int(self.opcode[i])
        if op in (Opcode.LOAD, Opcode.STORE):
            mem = int(self.mem["mem_id"][i])
            name = MEM_MNEMONIC[MemId(mem)] if mem in MemId._value2member_map_ else str(mem)
            return f"{Opcode(op).name}.{name}"
        if op == Opcode.ALU:
            aop = int(self.alu["alu_opcode"][i])
            return f"ALU.{AluOp(aop).name}" if aop in AluOp._value2member_map_ else f"ALU.{aop}"
        return Opcode(op).name if op in Opcode._value2member_map_ else f"opcode {op}"


def decode_for_sim(cfg: HwConfig, dram: np.ndarray, insn_addr: int, insn_count: int) -> DecodedProgram:
    """Read `insn_count` instructions at byte `insn_addr` and validate them."""
    end = _check_args(dram, insn_addr, insn_count)
    return _decode(cfg, dram[insn_addr:end], insn_count)


def _check_args(dram: np.ndarray, insn_addr: int, insn_count: int) -> int:
    """The end byte of the instructions, or SimError naming the bad argument."""
    check_dram(dram)
    if insn_count < 0:
        raise SimError(f"must not be negative, got {insn_count}", field="insn_count")
    if insn_addr < 0 or insn_addr % INSN_BYTES:
        raise SimError(f"byte address {insn_addr} is not {INSN_BYTES}-byte aligned", field="insn_addr")
    end = insn_addr + insn_count * INSN_BYTES
    if end > dram.size:
        raise SimError(f"instructions [{insn_addr:#x}, {end:#x}) run past the end of DRAM "
                       f"({dram.size:#x} bytes)", field="insn_addr")
    return end


_DECODED: "OrderedDict[tuple, DecodedProgram]" = OrderedDict()
_DECODED_LOCK = threading.Lock()
_DECODED_INSNS = 1 << 16
"""Instructions kept decoded over all remembered programs (under 1 KB each: at most ~50 MB)."""


def decode_cached(cfg: HwConfig, dram: np.ndarray, insn_addr: int, insn_count: int) -> DecodedProgram:
    """decode_for_sim, remembered by config and instruction bytes: a compiled network runs the
    same programs at every inference.  The program is shared, so nothing may modify it."""
    _check_args(dram, insn_addr, insn_count)
    code = dram[insn_addr:insn_addr + insn_count * INSN_BYTES]
    key = (cfg, code.tobytes())
    with _DECODED_LOCK:  # devices may run in threads (the tuner's pool)
        prog = _DECODED.get(key)
        if prog is not None:
            _DECODED.move_to_end(key)
            return prog
    prog = _decode(cfg, code, insn_count)
    if insn_count <= _DECODED_INSNS:
        with _DECODED_LOCK:
            _DECODED[key] = prog
            while sum(p.n for p in _DECODED.values()) > _DECODED_INSNS:
                _DECODED.popitem(last=False)
    return prog


def _decode(cfg: HwConfig, code: np.ndarray, insn_count: int) -> DecodedProgram:
    words = words_from_bytes(code)
    mem, gemm, alu = _columns(words, (mem_layout(cfg), gemm_layout(cfg), alu_layout(cfg)))
    opcode = mem["opcode"]
    prog = DecodedProgram(cfg, insn_count, opcode, np.zeros(insn_count, np.int64), mem, gemm, alu,
                          [], [], [])
    _validate(prog)
    _derive(prog)
    return prog


def _columns(words: np.ndarray, layouts) -> list[dict[str, np.ndarray]]:
    """decode_columns of each layout, with a field the layouts share (same bits: the opcode, the
    dependency flags, the GEMM/ALU loop) decoded once and its column shared: 29 int64 columns
    instead of 47 (~230 rather than ~380 bytes per instruction)."""
    done: dict[tuple, np.ndarray] = {}
    out = []
    for layout in layouts:
        cols = {}
        for f in layout.fields:
            key = (f.offset, f.width, f.signed)
            if key not in done:
                done[key] = extract(words, f)
            cols[f.name] = done[key]
        out.append(cols)
    return out


def check_dram(dram: np.ndarray) -> None:
    if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1:
        raise SimError("DRAM must be a 1-D numpy uint8 array", field="dram")
    if not dram.flags.c_contiguous or not dram.flags.writeable:
        raise SimError("DRAM must be a contiguous, writeable array", field="dram")


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _validate(p: DecodedProgram) -> None:
    """Raise SimError for the first instruction (in program order) that cannot run."""
    op = p.opcode
    is_mem = (op == Opcode.LOAD) | (op == Opcode.STORE)
    mem_id = p.mem["mem_id"]
    is_loop = (op == Opcode.GEMM) | (op == Opcode.ALU)
    checks: list[tuple[np.ndarray, str, str]] = [
        (op > Opcode.ALU, "opcode", "unknown opcode"),
        (is_mem & (mem_id > MemId.ACC_8BIT), "mem_id", "unknown memory type"),
        ((op == Opcode.LOAD) & (mem_id == MemId.OUT), "mem_id", "LOAD cannot target the OUT memory"),
        ((op == Opcode.STORE) & (mem_id != MemId.OUT) & (mem_id <= MemId.ACC_8BIT), "mem_id",
         "STORE only writes the OUT memory"),
        ((op == Opcode.ALU) & (p.alu["alu_opcode"] > AluOp.MUL), "alu_opcode", "unknown ALU operation"),
        (is_loop & (p.gemm["uop_end"] > p.cfg.uop_depth), "uop_end",
         f"micro-op range ends past the micro-op buffer ({p.cfg.uop_depth} entries)"),
    ]
    if not p.cfg.alu_mul:
        checks.append(((op == Opcode.ALU) & (p.alu["alu_opcode"] == AluOp.MUL), "alu_opcode",
                       "ALU MUL is not implemented by this configuration (alu_mul is false)"))
    for pad in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"):
        checks.append(((op == Opcode.STORE) & (p.mem[pad] != 0), pad, "STORE does not take padding"))
    load_module = (op == Opcode.LOAD) & ((mem_id == MemId.INP) | (mem_id == MemId.WGT))
    for flag in ("pop_prev", "push_prev"):
        checks.append((load_module & (p.mem[flag] != 0), flag,
                       "the load module has no previous module to exchange tokens with"))
    for flag in ("pop_next", "push_next"):
        checks.append(((op == Opcode.STORE) & (p.mem[flag] != 0), flag,
                       "the store module has no next module to exchange tokens with"))
    checks += _semantic_checks(p)  # last: at one index, the errors above say more
    worst: tuple[int, str, str] | None = None
    for mask, field, message in checks:
        i = _first(mask)
        if i is not None and (worst is None or i < worst[0]):
            worst = (i, field, message)
    if worst is not None:
        i, field, message = worst
        raise SimError(message, insn_index=i, field=field, mnemonic=p.mnemonic(i))


_PADS = ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")


def _semantic_checks(p: DecodedProgram) -> list[tuple[np.ndarray, str, str]]:
    """Instructions whose meaning on VTA's hardware differs from what they ask for.

    Each configuration either implements the extended behaviour (a field of HwConfig)
    or rejects the instruction, so no program runs one way here and another on VTA.
    """
    cfg, op, mem_id = p.cfg, p.opcode, p.mem["mem_id"]
    load = op == Opcode.LOAD
    checks: list[tuple[np.ndarray, str, str]] = []
    uop_load = load & (mem_id == MemId.UOP)
    wgt_load = load & (mem_id == MemId.WGT)
    empty_load = load & (p.mem["x_size"] == 0)
    for pad in _PADS:
        padded = p.mem[pad] != 0
        checks.append((uop_load & padded, pad, "LOAD.UOP does not take padding (VTA copies x_size micro-ops)"))
        checks.append((empty_load & padded, pad,
                       "a LOAD with x_size 0 cannot take padding (VTA would write the padding zeros)"))
        if not cfg.wgt_load_pad:
            checks.append((wgt_load & padded, pad,
                           "LOAD.WGT padding is not implemented by this configuration (wgt_load_pad is false)"))
    checks.append((uop_load & (p.mem["x_size"] != 0) & (p.mem["y_size"] != 1), "y_size",
                   "LOAD.UOP copies one row of x_size micro-ops: y_size must be 1"))
    if not cfg.acc8_load:
        checks.append((load & (mem_id == MemId.ACC_8BIT), "mem_id",
                       "LOAD.ACC8 is not implemented by this configuration (acc8_load is false)"))
    if not cfg.alu_reset:
        checks.append(((op == Opcode.ALU) & (p.alu["reset"] != 0), "reset",
                       "ALU reset is not implemented by this configuration (alu_reset is false)"))
    finish = _first(op == Opcode.FINISH)
    if finish is not None:
        after = np.zeros(p.n, dtype=bool)
        after[finish + 1:] = True
        checks.append((after, "opcode", f"an instruction after the FINISH at {finish} (VTA would still run it)"))
    return checks


def _derive(p: DecodedProgram) -> None:
    """Module of each instruction, its token queues and its executor arguments."""
    op, mem_id = p.opcode, p.mem["mem_id"]
    module = np.full(p.n, int(Module.COMPUTE), dtype=np.int64)
    module[op == Opcode.STORE] = Module.STORE
    module[(op == Opcode.LOAD) & ((mem_id == MemId.INP) | (mem_id == MemId.WGT))] = Module.LOAD
    p.module = module

    # One code per (module, four flags); the queues of each distinct code are worked out once.
    flags = ("pop_prev", "pop_next", "push_prev", "push_next")
    code = module * 16
    for k, f in enumerate(flags):
        code = code + (p.mem[f] != 0) * (1 << k)
    # Queue a flag refers to, per module: (pop_prev, pop_next, push_prev, push_next)
    queue_of = {Module.LOAD: (None, C2L, None, L2C), Module.COMPUTE: (L2C, S2C, C2L, C2S),
                Module.STORE: (C2S, None, S2C, None)}
    distinct, inverse = np.unique(code, return_inverse=True)
    pop_of, push_of = [], []
    for c in distinct.tolist():
        qs, f = queue_of[Module(c // 16)], [c >> k & 1 for k in range(4)]
        pop_of.append(tuple(qs[k] for k in (0, 1) if f[k]))
        push_of.append(tuple(qs[k] for k in (2, 3) if f[k]))
    which = inverse.reshape(-1).tolist()
    pops = [pop_of[w] for w in which]
    pushes = [push_of[w] for w in which]
    p.pops, p.pushes = pops, pushes

    # Each instruction's row comes from its own layout only (rows of all three layouts for
    # every instruction held ~1 KB per instruction), and equal rows share one tuple.
    columns = {
        Opcode.LOAD: [p.mem[f] for f in _MEM_FIELDS],
        Opcode.STORE: [p.mem[f] for f in _MEM_FIELDS],
        Opcode.GEMM: [p.gemm[f] for f in _LOOP_FIELDS] + [p.gemm["wgt_factor_out"], p.gemm["wgt_factor_in"]],
        Opcode.ALU: [p.alu[f] for f in _LOOP_FIELDS] + [p.alu["alu_opcode"], p.alu["use_imm"], p.alu["imm"]],
    }
    args: list[tuple[int, ...]] = [(int(Opcode.FINISH),)] * p.n
    shared: dict[tuple[int, ...], tuple[int, ...]] = {}
    for code, cols in columns.items():
        idx = np.flatnonzero(op == code)
        if idx.size == 0:
            continue
        for start in range(0, idx.size, 1 << 16):  # in slices: the row lists are temporary
            part = idx[start:start + (1 << 16)]
            rows = np.stack([op[part]] + [c[part] for c in cols], axis=1).tolist()
            for i, row in zip(part.tolist(), rows):
                t = tuple(row)
                args[i] = shared.setdefault(t, t)
    p.args = args


def static_counters(prog: DecodedProgram) -> Counters:
    """The work a program does if every instruction runs (for devices that do not count it)."""
    op, mem, loop = prog.opcode, prog.mem, prog.gemm
    uops = loop["iter_out"] * loop["iter_in"] * np.maximum(loop["uop_end"] - loop["uop_bgn"], 0)
    gemm = op == Opcode.GEMM
    counters = Counters(insns=prog.n,
                        gemm_uops=int(uops[gemm & (loop["reset"] == 0)].sum()),
                        gemm_reset_uops=int(uops[gemm & (loop["reset"] != 0)].sum()),
                        alu_uops=int(uops[op == Opcode.ALU].sum()))
    moved = mem["y_size"] * mem["x_size"]
    for code, record in ((Opcode.LOAD, counters.read), (Opcode.STORE, counters.wrote)):
        for m in MemId:
            sel = (op == code) & (mem["mem_id"] == m)
            total = int(moved[sel].sum()) * prog.cfg.elem_bytes(m)
            if total:
                record(m, total)
    return counters
