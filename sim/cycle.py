"""Cycle model: the functional semantics plus time.

Fetch, load, compute and store are coroutines on a small discrete-event kernel.
Durations come from `cost_rules.static_costs` (one numpy pass over the program), so
the event loop only decides when each instruction starts: when its module is
free, its command has been dispatched, its tokens are there and, for DMA, the
shared memory port is free (first come, first served; ties go to fetch, then
load, compute, store).  Tokens pushed at an instruction's last cycle can be
popped in that same cycle.  Data effects run when an instruction starts, through
the same `Machine` as the functional model.

FINISH ends the run's cycles, not the other modules: as on the RTL, they drain (an
instruction the program did not order before FINISH still runs), and one that is
then left waiting for a token never runs, which is a deadlock.
"""

from __future__ import annotations

import heapq
import time
from collections import deque

from vtakit.errors import DeviceTimeout, SimError
from vtakit.isa.fields import INSN_BYTES
from vtakit.isa.opcodes import Module, Opcode
from vtakit.sim.decoded import DecodedProgram
from vtakit.sim.machine import Machine
from vtakit.sim.stats import MODULE_NAMES, Counters, ModuleStats
from vtakit.sim.stuck import deadlock_error
from vtakit.sim.cost_rules import beats_until, fetch_burst, static_costs
from vtakit.sim.trace import TraceRecorder

_TIMEOUT_CHECK_EVENTS = 4096


class CycleSim:
    """One run of the cycle model over a decoded program."""

    def __init__(self, prog: DecodedProgram, machine: Machine, counters: Counters, insn_addr: int,
                 trace: TraceRecorder | None = None, timeout_s: float | None = None):
        self.prog, self.machine, self.counters = prog, machine, counters
        self.cfg = prog.cfg
        self.insn_addr = insn_addr
        self.trace = trace
        self.timeout_s = timeout_s
        duration, port = static_costs(self.cfg, prog.opcode, prog.mem, prog.gemm, prog.alu["use_imm"])
        self.duration, self.port = duration.tolist(), port.tolist()
        self.now = 0
        self.port_free = 0
        self.finished_at: int | None = None
        self.finish_index = -1
        self.cmdq: list[deque] = [deque(), deque(), deque()]
        self.tokens = machine.tokens
        self.stats = {name: ModuleStats() for name in MODULE_NAMES}
        self.state: dict[str, tuple] = {}
        self._heap: list = []
        self._seq = 0
        self._waiting: dict[tuple, list[int]] = {}
        self._gens = [self._fetch(), self._module(Module.LOAD), self._module(Module.COMPUTE),
                      self._module(Module.STORE)]

    # ------------------------------------------------------------------ kernel
    def _schedule(self, t: int, pid: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, pid, self._seq))

    def _notify(self, key: tuple) -> None:
        pids = self._waiting.pop(key, None)
        if pids:
            for pid in pids:
                self._schedule(self.now, pid)

    def run(self) -> int:
        """Simulate until FINISH; returns the cycle count."""
        for pid in range(len(self._gens)):
            self._schedule(0, pid)
        heap, gens = self._heap, self._gens
        deadline = time.monotonic() + self.timeout_s if self.timeout_s else None
        events = 0
        while heap:  # past FINISH the other modules drain until they block or run dry
            t, pid, _ = heapq.heappop(heap)
            self.now = t
            try:
                cmd = next(gens[pid])
            except StopIteration:
                continue
            if type(cmd) is int:
                self._schedule(cmd, pid)
            else:
                self._waiting.setdefault(cmd, []).append(pid)
            events += 1
            if deadline is not None and events % _TIMEOUT_CHECK_EVENTS == 0 \
                    and time.monotonic() > deadline:
                raise DeviceTimeout(f"cycle simulation exceeded {self.timeout_s} s "
                                    f"(simulated {self.now} cycles)")
        if self.finished_at is None:
            self._raise_stuck()
        self._check_drained()
        self._close_stats(self.finished_at)
        return self.finished_at

    # --------------------------------------------------------------- processes
    def _fetch(self):
        cfg, prog = self.cfg, self.prog
        st = self.stats["fetch"]
        module = prog.module.tolist()
        qdepth, lat = cfg.cmd_queue_depth, cfg.mem_latency
        pos, last = 0, -1
        while pos < prog.n:
            addr = self.insn_addr + INSN_BYTES * pos
            k = fetch_burst(cfg, addr, prog.n - pos)
            grant = max(self.now, self.port_free)
            hold = lat + beats_until(cfg, addr, k * INSN_BYTES)
            self.port_free = grant + hold
            st.stall_memory += grant - self.now
            st.busy += hold
            self.counters.bytes_read["INSN"] = self.counters.bytes_read.get("INSN", 0) + k * INSN_BYTES
            if self.trace is not None:
                self.trace.span("fetch", f"fetch {k}", grant, grant + hold, first=pos)
                self.trace.span("memory port", "fetch", grant, grant + hold)
            for j in range(k):
                i = pos + j
                t = max(grant + lat + beats_until(cfg, addr, (j + 1) * INSN_BYTES), last + 1)
                m = module[i]
                queue = self.cmdq[m]
                while len(queue) >= qdepth:
                    self.state["fetch"] = ("dispatch", i, m)
                    yield ("space", m)
                    if self.now > t:
                        st.stall_queue += self.now - t
                        t = self.now
                queue.append((i, t))
                st.insns += 1
                self._notify(("cmd", m))
                last = t
            pos += k
            self.state["fetch"] = ("running",)
            if pos < prog.n:
                yield max(last + 1, grant + hold)
        self.state["fetch"] = ("done",)

    def _module(self, m: Module):
        name = m.label
        st = self.stats[name]
        queue = self.cmdq[m]
        prog, machine, counters, trace = self.prog, self.machine, self.counters, self.trace
        duration, port = self.duration, self.port
        pops, pushes = prog.pops, prog.pushes
        finish = [o == Opcode.FINISH for o in prog.opcode.tolist()]
        tokens, tdepth = self.tokens, self.cfg.token_queue_depth
        while True:
            if not queue:
                self.state[name] = ("idle",)
                yield ("cmd", m)
                continue
            i, avail = queue[0]
            if avail > self.now:
                yield avail
            queue.popleft()
            self._notify(("space", m))
            taken = self.now
            for q in pops[i]:
                while tokens[q] == 0:
                    self.state[name] = ("pop", i, q)
                    yield ("tok", q)
                tokens[q] -= 1
                self._notify(("room", q))
            ready = self.now
            d = duration[i]
            start = ready
            if port[i]:
                # let every module that wants the port in this cycle ask first: the heap
                # orders same-cycle events by module, which is the arbiter's tie-break
                yield ready
                start = max(ready, self.port_free)
                self.port_free = start + d
            self.state[name] = ("run", i)
            machine.execute(prog, i, counters)
            end = start + d
            st.stall_token += ready - taken
            st.stall_memory += start - ready
            st.busy += d
            st.insns += 1
            if trace is not None:
                self._trace_insn(name, i, taken, ready, start, end)
            yield end
            if finish[i]:
                self.finished_at, self.finish_index = end, i
                return
            for q in pushes[i]:
                waited = self.now
                while tokens[q] >= tdepth:
                    self.state[name] = ("push", i, q)
                    yield ("room", q)
                st.stall_token += self.now - waited
                tokens[q] += 1
                self._notify(("tok", q))

    # ----------------------------------------------------------------- reports
    def _trace_insn(self, lane: str, i: int, taken: int, ready: int, start: int, end: int) -> None:
        trace, mnemonic = self.trace, self.prog.mnemonic(i)
        if ready > taken:
            trace.span(lane, "wait token", taken, ready, insn=i)
        if start > ready:
            trace.span(lane, "wait port", ready, start, insn=i)
        trace.span(lane, mnemonic, start, end, insn=i)
        if self.port[i]:
            trace.span("memory port", f"{lane}: {mnemonic}", start, end, insn=i)

    def _close_stats(self, cycles: int) -> None:
        for st in self.stats.values():
            busy = min(st.busy, cycles)
            st.busy = busy
            st.idle = max(0, cycles - busy - st.stall_token - st.stall_memory - st.stall_queue)

    def _check_drained(self) -> None:
        """After FINISH and the drain: an instruction still waiting (or queued behind one)
        never runs; a module whose last instruction ran is done, even with a token to push."""
        stuck = {}
        for m in (Module.LOAD, Module.STORE):
            state = self.state.get(m.label, ("idle",))
            if state[0] == "pop" or (state[0] == "push" and self.cmdq[m]):
                stuck[m.label] = state
        if stuck:
            raise deadlock_error(self.prog, stuck, self.tokens, cycle=self.finished_at,
                                 finish=self.finish_index)

    def _raise_stuck(self) -> None:
        stuck = {}
        for name, state in self.state.items():
            if state[0] in ("pop", "push"):
                stuck[name] = state
            elif state[0] == "dispatch" and name == "fetch":
                stuck[name] = state
        if not stuck:
            raise SimError(f"all {self.prog.n} instructions ran without reaching FINISH",
                           field="insn_count")
        raise deadlock_error(self.prog, stuck, self.tokens, cycle=self.now)


def run_cycle(prog: DecodedProgram, machine: Machine, counters: Counters, insn_addr: int,
              trace: TraceRecorder | None = None, timeout_s: float | None = None
              ) -> tuple[int, dict[str, ModuleStats]]:
    sim = CycleSim(prog, machine, counters, insn_addr, trace, timeout_s)
    cycles = sim.run()
    return cycles, sim.stats
