"""RtlDevice: the Verilator-built RTL behind the Device protocol.

The DRAM is a numpy array the C++ harness reads and writes directly; a run writes
the VTA control registers through AXI4-Lite, starts the design and clocks it in
C++ until FINISH.  Errors the design flags (a malformed instruction, an access
outside a buffer or DRAM) become SimError naming the instruction; a design that
stops making progress, or exceeds its cycle or time budget, is a DeviceTimeout
(a DeadlockError when the token flow shows the program deadlocks).  Without a time
limit, the cycle budget derives from the program (sim.budget) and a program with
more work than the default budget is refused before a cycle runs.  At FINISH the
token flow, replayed without data, says whether an instruction was left waiting
(it never ran: a DeadlockError, as on the simulators).
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np

from vtakit.devices import register_device
from vtakit.errors import BudgetExceeded, DeadlockError, DeviceTimeout, SimError
from vtakit.hw.build import build, trace_format
from vtakit.isa.config import HwConfig
from vtakit.isa import MemId, Opcode
from vtakit.sim.budget import HOW_TO_RAISE, check_work, cycle_budget
from vtakit.sim.decoded import DecodedProgram, check_dram, decode_for_sim, static_counters
from vtakit.sim.functional import replay_tokens
from vtakit.sim.stats import RunStats
from vtakit.isa.arith import round_up

RUN_FINISHED, RUN_RTL_ERROR, RUN_MEM_ERROR, RUN_RUNNING, RUN_HANG = range(5)
REG_ERROR, REG_ERROR_INDEX = 0x0020, 0x0024
_STEP_CYCLES = 1 << 20

# Error codes of vta_top (see vta_fetch / vta_load / vta_compute / vta_store).
ERROR_CODES = {
    1: ("opcode", "unknown opcode"),
    2: ("mem_id", "memory type not valid for this instruction"),
    3: ("y_pad_0", "STORE does not take padding"),
    4: ("pop_prev", "dependency flag the module cannot have"),
    5: ("alu_opcode", "ALU operation not implemented by this configuration"),
    6: ("uop_end", "micro-op range ends past the micro-op buffer"),
    7: ("sram_base", "on-chip buffer access out of range"),
    8: ("dram_base", "DRAM access out of range"),
    9: ("uop", "micro-op index out of range of its buffer"),
    10: ("x_pad_0", "padding this LOAD does not take in this configuration"),
    11: ("y_size", "LOAD.UOP copies one row of x_size micro-ops: y_size must be 1"),
    12: ("reset", "ALU reset is not implemented by this configuration (alu_reset is false)"),
    13: ("opcode", "an instruction after FINISH"),
}

_libs: dict[str, ctypes.CDLL] = {}


def load_harness(path: Path) -> ctypes.CDLL:
    """The harness library at `path` with its C signatures declared (loaded once per process;
    RtlDevice and the simulated PYNQ board share it)."""
    key = str(path)
    if key not in _libs:
        lib = ctypes.CDLL(key)
        vp, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
        lib.vta_create.restype = vp
        lib.vta_create.argtypes = [vp, u64, u32]
        lib.vta_destroy.argtypes = [vp]
        lib.vta_set_dram.argtypes = [vp, vp, u64]
        lib.vta_trace_open.argtypes = [vp, ctypes.c_char_p]
        lib.vta_trace_open.restype = ctypes.c_int
        lib.vta_write_reg.argtypes = [vp, u32, u32]
        lib.vta_read_reg.argtypes = [vp, u32]
        lib.vta_read_reg.restype = u32
        lib.vta_start.argtypes = [vp, u32, u32]
        lib.vta_step.argtypes = [vp, u64, u64, ctypes.POINTER(u64), ctypes.POINTER(u64)]
        lib.vta_step.restype = ctypes.c_int
        _libs[key] = lib
    return _libs[key]


def dram_overrun_index(prog: DecodedProgram, addr: int, dram_bytes: int) -> int | None:
    """The LOAD or STORE whose DRAM bytes reach past `dram_bytes` and cover `addr` (the harness's
    AXI slave sees addresses, not instructions); else the first one that reaches past the end."""
    mem = prog.mem
    first = None
    for i in np.flatnonzero(np.isin(prog.opcode, (Opcode.LOAD, Opcode.STORE))):
        m = int(mem["mem_id"][i])
        if m not in MemId._value2member_map_:
            continue
        eb = prog.cfg.elem_bytes(m)
        start = int(mem["dram_base"][i]) * eb
        end = start + ((int(mem["y_size"][i]) - 1) * int(mem["x_stride"][i]) + int(mem["x_size"][i])) * eb
        if end > dram_bytes and int(mem["y_size"][i]) and int(mem["x_size"][i]):
            if start <= addr < end:
                return int(i)
            first = int(i) if first is None else first
    return first


class RtlDevice:
    """The RTL simulated by Verilator; on-chip state persists across runs like the board's."""

    def __init__(self, config: HwConfig, *, dram_bytes: int = 256 << 20, dram: np.ndarray | None = None,
                 trace: str | Path | None = None, max_cycles: int = 1 << 40, hang_cycles: int = 200_000,
                 prevalidate: bool = True):
        """`prevalidate` checks each program in Python before clocking the design (a clear error
        before any cycle runs); False leaves bad instructions to the design's own checks, as on
        the board, and flags a program the design accepts but the checker rejects."""
        self._handle = None
        self.prevalidate = prevalidate
        self.config = config
        self.dram = dram if dram is not None else np.zeros(dram_bytes, dtype=np.uint8)
        check_dram(self.dram)
        self.max_cycles = max_cycles
        self.hang_cycles = hang_cycles
        self.trace = str(trace) if trace else None
        if self.trace:
            Path(self.trace).parent.mkdir(parents=True, exist_ok=True)
        self._lib = load_harness(build(config, trace=trace_format(self.trace)))
        self._top = 0
        self._open()

    def _open(self) -> None:
        self._handle = self._lib.vta_create(self.dram.ctypes.data, self.dram.size, self.config.mem_latency)
        self._tokens = [0, 0, 0, 0]
        """The design's dependency tokens between runs, as the token replay computes them."""
        if self.trace:
            self._lib.vta_trace_open(self._handle, self.trace.encode())

    def close(self) -> None:
        if self._handle:
            self._lib.vta_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def alloc(self, nbytes: int, align: int = 4096) -> int:
        addr = round_up(self._top, align)
        if addr + nbytes > self.dram.size:
            raise SimError(f"out of device memory: {nbytes} bytes requested, {self.dram.size - addr} free",
                           field="dram")
        self._top = addr + nbytes
        return addr

    def read_reg(self, offset: int) -> int:
        return int(self._lib.vta_read_reg(self._handle, offset))

    def run(self, insn_addr: int, insn_count: int, timeout_s: float | None = None) -> RunStats:
        try:
            prog, rejected = decode_for_sim(self.config, self.dram, insn_addr, insn_count), None
        except SimError as e:
            if self.prevalidate or e.field in ("insn_addr", "insn_count", "dram"):
                raise
            prog, rejected = None, e
        max_cycles, budget = self.max_cycles, None
        if prog is not None and timeout_s is None:
            check_work(prog, timeout_s, "RTL")
            budget = cycle_budget(prog)
            max_cycles = min(max_cycles, budget)
        t0 = time.perf_counter()
        deadline = t0 + timeout_s if timeout_s else None
        cycles, bad_addr = ctypes.c_uint64(0), ctypes.c_uint64(0)
        self._lib.vta_start(self._handle, insn_addr, insn_count)
        while True:
            step = max(1, min(_STEP_CYCLES, max_cycles - cycles.value))
            status = self._lib.vta_step(self._handle, step, self.hang_cycles, ctypes.byref(cycles),
                                        ctypes.byref(bad_addr))
            if status != RUN_RUNNING:
                break
            if cycles.value >= max_cycles or (deadline and time.perf_counter() > deadline):
                self._reset()
                why, error = "", DeviceTimeout  # the wall clock or the caller's max_cycles: may pass next time
                if budget is not None and cycles.value >= budget:
                    why = (f": the program's cycle budget of {budget:,} (sim.budget) is spent; "
                           f"{HOW_TO_RAISE}")
                    error = BudgetExceeded  # derived from the program: the same on every try
                raise error(f"RTL run stopped after {cycles.value} cycles "
                            f"({time.perf_counter() - t0:.1f} s) without reaching FINISH{why}")
        if status == RUN_RTL_ERROR:
            code, index = self.read_reg(REG_ERROR) >> 4 & 0xF, self.read_reg(REG_ERROR_INDEX)
            self._reset()
            field, message = ERROR_CODES.get(code, ("", f"error code {code}"))
            raise SimError(f"RTL: {message}", insn_index=index, field=field or None,
                           mnemonic=prog.mnemonic(index) if prog is not None and index < prog.n else None)
        if status == RUN_MEM_ERROR:
            self._reset()
            index = dram_overrun_index(prog, bad_addr.value, self.dram.size) if prog is not None else None
            raise SimError(f"RTL: DRAM access at byte {bad_addr.value:#x} beyond the {self.dram.size:#x}-byte "
                           f"DRAM", field="dram_base", insn_index=index,
                           mnemonic=prog.mnemonic(index) if index is not None else None)
        if status == RUN_HANG:
            tokens = self._tokens
            self._reset()
            self._diagnose_hang(prog, tokens, cycles.value)
        if rejected is not None:
            self._reset()  # e.g. an instruction after FINISH: the design may flag it after finishing
            raise SimError(f"the RTL ran to FINISH a program the checker rejects: {rejected.detail}",
                           field=rejected.field, insn_index=rejected.insn_index, mnemonic=rejected.mnemonic)
        try:
            self._tokens = replay_tokens(prog, self._tokens)
        except DeadlockError:
            self._reset()  # the waiting instruction still sits in its queue
            raise
        counters = static_counters(prog)
        return RunStats(config=self.config, model="rtl", cycles=int(cycles.value), insns=insn_count,
                        gemm_uops=counters.gemm_uops, gemm_reset_uops=counters.gemm_reset_uops,
                        alu_uops=counters.alu_uops, bytes_read=counters.bytes_read,
                        bytes_written=counters.bytes_written, wall_s=time.perf_counter() - t0,
                        trace_path=self.trace)

    def _reset(self) -> None:
        """After an error the design is halted; start from a fresh one (on-chip state is lost)."""
        self.close()
        self._open()

    def _diagnose_hang(self, prog: DecodedProgram | None, tokens: list[int], cycles: int) -> None:
        message = (f"RTL made no progress for {self.hang_cycles} cycles (after {cycles} cycles); "
                   f"its modules wait on each other")
        if prog is not None:
            try:
                # The token flow does not depend on data: replay it without data.
                replay_tokens(prog, tokens)
            except DeadlockError as e:
                raise DeadlockError(f"{message}: {e}", stuck=e.stuck, cycle=cycles) from None
        raise DeviceTimeout(message)


def _register() -> None:
    register_device("rtl", RtlDevice, description="the RTL under Verilator (cycle-exact)")


_register()

