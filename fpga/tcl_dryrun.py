"""Run a generated build.tcl in a real Tcl interpreter with Vivado's commands stubbed out.

Python's tkinter carries Tcl 8.6.  Sourcing the script there, with every Vivado command recorded
instead of executed, catches what reading cannot: undefined variables, bad `expr`s, a command
left open, a Vivado command name that does not exist (against the list below), and it yields the
block design as the script would build it (which pins each net joins, what address the registers
get, how the PS is configured) for fpga.project_checks to compare with the board and the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The Vivado commands a generated script may use (Vivado Design Suite Tcl Command Reference, UG835).
VIVADO_COMMANDS = frozenset("""
create_project add_files set_property get_files get_filesets current_fileset update_compile_order
close_project current_project get_board_parts update_ip_catalog create_bd_design create_bd_cell apply_bd_automation
get_bd_cells connect_bd_intf_net get_bd_intf_pins connect_bd_net get_bd_pins assign_bd_address
get_bd_addr_spaces get_bd_addr_segs validate_bd_design save_bd_design make_wrapper launch_runs wait_on_run
get_runs get_property open_run report_timing_summary report_utilization get_timing_paths
ipx::package_project ipx::current_core ipx::get_bus_interfaces ipx::get_bus_parameters
ipx::add_bus_parameter ipx::add_user_parameter ipx::associate_bus_interfaces ipx::get_memory_maps
ipx::add_memory_map ipx::get_address_blocks
ipx::add_address_block ipx::add_register ipx::get_address_spaces ipx::add_address_space
ipx::create_xgui_files ipx::update_checksums ipx::check_integrity ipx::save_core
""".split())

_STUBS = r"""
set ::vtakit_calls {}
set ::vtakit_out {}
rename file ::vtakit_real_file
proc file {sub args} {
  if {$sub in {mkdir copy delete rename}} { lappend ::vtakit_calls [list file $sub {*}$args]; return "" }
  return [::vtakit_real_file $sub {*}$args]
}
proc puts {args} { lappend ::vtakit_out [lindex $args end] }
proc exit {{code 0}} { return -code error "vtakit-exit $code" }
proc unknown {args} {
  lappend ::vtakit_calls $args
  set cmd [lindex $args 0]
  switch -glob -- $cmd {
    get_board_parts { return [expr {$::vtakit_board_files ? [lindex $args end] : ""}] }
    ipx::current_core { return core }
    ipx::get_bus_interfaces - ipx::get_bus_parameters { return [lindex $args 1] }
    ipx::get_* { return "" }
    ipx::add_* { return "[lindex $args 0]:[lindex $args 1]" }
    get_bd_pins - get_bd_intf_pins - get_bd_cells - get_bd_addr_segs - get_bd_addr_spaces {
      return "[lindex $args end]"
    }
    create_bd_cell { return [lindex $args end] }
    get_property {
      switch -- [lindex $args 1] {
        PROGRESS { return "100%" }
        SLACK { return $::vtakit_slack }
        DIRECTORY { return /vivado/runs/impl_1 }
        default { return "" }
      }
    }
    get_files { return "/vivado/files/[lindex $args end]" }
    make_wrapper { return /vivado/wrapper.v }
    default { return "" }
  }
}
"""


@dataclass
class DryRun:
    """What the script did: its Vivado calls (each a list of words), what it printed, how it ended."""

    calls: list[tuple[str, ...]] = field(default_factory=list)
    output: list[str] = field(default_factory=list)
    error: str | None = None
    exit_code: int | None = None

    def commands(self) -> set[str]:
        return {c[0] for c in self.calls if c}

    def unknown_commands(self) -> set[str]:
        return {c for c in self.commands() if c not in VIVADO_COMMANDS and c != "file"}

    def called(self, command: str) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c and c[0] == command]

    def option(self, call: tuple[str, ...], name: str) -> str | None:
        return call[call.index(name) + 1] if name in call[:-1] else None

    def nets(self) -> list[set[str]]:
        """Each connect_bd_net's pins and each connect_bd_intf_net's pair."""
        return [set(c[1:]) for c in self.calls if c and c[0] in ("connect_bd_net", "connect_bd_intf_net")]

    def cell_config(self, cell: str) -> dict[str, str]:
        """CONFIG.* values set with set_property -dict on `cell`."""
        config: dict[str, str] = {}
        for c in self.called("set_property"):
            if len(c) == 4 and c[1] == "-dict" and c[3] == cell:
                words = _split(c[2])
                config.update({words[k]: words[k + 1] for k in range(0, len(words) - 1, 2)})
        return config


_TCL = None


def _interp():
    import tkinter  # lazy: tkinter (Debian packages it apart: python3-tk)

    return tkinter.Tcl()


def _split(value: str) -> tuple[str, ...]:
    global _TCL
    _TCL = _TCL or _interp()
    return tuple(str(w) for w in _TCL.splitlist(value))


def available() -> bool:
    """Whether this Python has Tcl (tkinter); Debian packages it separately (python3-tk)."""
    try:
        import tkinter  # noqa: F401  # lazy: tkinter
    except ImportError:
        return False
    return True


def dry_run(script: str | Path, stage: str = "all", *, board_files: bool = True, slack_ns: float = 0.25) -> DryRun:
    """Source `script` with Vivado stubbed: `board_files` is whether get_board_parts finds the board,
    `slack_ns` the worst setup slack the timing query returns."""
    import tkinter  # lazy: tkinter

    tcl = _interp()
    tcl.eval(_STUBS)
    tcl.setvar("vtakit_board_files", int(board_files))
    tcl.setvar("vtakit_slack", str(slack_ns))
    tcl.eval(f"set argv [list {stage}]; set argc 1")
    result = DryRun()
    try:
        tcl.eval(f"source [list {Path(script).resolve()}]")
    except tkinter.TclError as e:
        text = str(e)
        if text.startswith("vtakit-exit "):
            result.exit_code = int(text.split()[1])
        else:
            result.error = f"{text} (at: {tcl.eval('set ::errorInfo').splitlines()[-1].strip()})"
    # eval returns the lists as strings: split them one level at a time (getvar would nest tuples)
    result.calls = [tuple(tcl.splitlist(c)) for c in tcl.splitlist(tcl.eval("set ::vtakit_calls"))]
    result.output = list(tcl.splitlist(tcl.eval("set ::vtakit_out")))
    return result
