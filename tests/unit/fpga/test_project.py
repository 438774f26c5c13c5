"""`vtakit fpga project` output for every board: the files, the Tcl (parsed, and sourced with Vivado
stubbed), the ports it connects against vta_top's, and Yosys elaborating the same top level.
Each check is also shown to catch the fault it is there for.  Full synthesis of the top:
tests/integration/fpga/test_project.py."""

import json
import re

import pytest

from vtakit.fpga import tcl_dryrun
from vtakit.hw.boards import BOARDS
from vtakit.fpga.project_checks import (check_block_design, check_ports, check_project, check_settings, check_yosys,
                                tcl_balance, yosys_top_ports)
from vtakit.fpga.project import write_project
from vtakit.isa import HwConfig

needs_tcl = pytest.mark.skipif(not tcl_dryrun.available(), reason="this Python has no Tcl (tkinter)")


@pytest.mark.parametrize("name", list(BOARDS))
def test_project_for_every_board(tmp_path, name):
    project = write_project(name, None, tmp_path)
    board, cfg = project.board, project.config
    assert check_project(project) == []
    tcl = project.tcl.read_text()
    assert board.part in tcl and f"0x{board.register_base:08X}" in tcl and board.mem_ports[0] in tcl
    assert [p.name for p in project.rtl][0] == "vta_pkg.sv" and (tmp_path / "rtl" / "vta_top.sv").is_file()
    side = json.loads(project.sidecar.read_text())
    assert side["fingerprint"] == cfg.fingerprint() and side["board"] == name
    assert project.bitstream.name == f"{project.stem}.bit" and project.sidecar.stem == project.stem
    assert "\tVTAKIT_JOBS=$(JOBS) $(VIVADO) -mode batch" in project.makefile.read_text()
    assert "not been tried" in project.readme.read_text()
    ports = yosys_top_ports(project.rtl)
    assert ports["m_axi_rdata"] == ("input", cfg.bus_bytes * 8) and ports["s_axil_awaddr"] == ("input", 16)


@needs_tcl
def test_dry_run_builds_the_block_design(tmp_path):
    project = write_project("ultra96-v2", None, tmp_path)
    run = tcl_dryrun.dry_run(project.tcl)
    assert run.error is None and run.unknown_commands() == set()
    assert {"vta_0/s_axil", "smc_ctrl/M00_AXI"} in run.nets()
    assert run.cell_config("ps")["CONFIG.PSU__SAXIGP2__DATA_WIDTH"] == "128"
    assert any("wrote" in line for line in run.output)
    assert tcl_dryrun.dry_run(project.tcl, "bd").exit_code == 0


def test_checks_catch_what_they_are_for(tmp_path):
    project = write_project("pynq-z1", None, tmp_path)
    tcl = project.tcl.read_text()
    # a connection dropped: the reset
    project.tcl.write_text(tcl.replace(" [get_bd_pins vta_0/rst]", ""))
    assert any("port rst is neither connected" in p for p in check_ports(project))
    # a pin vta_top does not have
    project.tcl.write_text(tcl.replace("vta_0/m_axi", "vta_0/m_axi_mem"))
    assert any("m_axi_mem, which vta_top does not have" in p for p in check_ports(project))
    # the memory port width disagreeing with the RTL
    project.tcl.write_text(tcl.replace("set bus_bits    64", "set bus_bits    128"))
    assert any("m_axi_rdata is 64 bits" in p for p in check_yosys(project))
    assert any("bus_bits" in p for p in check_settings(project))
    # unbalanced Tcl
    project.tcl.write_text(tcl.replace("foreach smc {smc_ctrl smc_mem} {", "foreach smc {smc_ctrl smc_mem {"))
    assert any("never closed" in p for p in check_settings(project))
    project.tcl.write_text(tcl)
    # a new port on vta_top the script knows nothing about
    top = project.rtl[-1]
    sv = top.read_text()
    top.write_text(sv.replace("  input  logic                   rst,", "  input  logic                   rst,\n"
                                                                        "  input  logic                   irq_ack,"))
    assert any("irq_ack is neither connected" in p for p in check_ports(project))
    top.write_text(sv)
    # a Makefile recipe indented with spaces
    project.makefile.write_text(project.makefile.read_text().replace("\trm -rf", "    rm -rf"))
    assert any("tab" in p for p in check_settings(project))
    assert tcl_balance('puts "a [list b "c"] d"; set x ${y}_z') == []


@needs_tcl
def test_dry_run_catches_script_errors(tmp_path):
    project = write_project("zcu104", None, tmp_path)
    tcl = project.tcl.read_text()
    project.tcl.write_text(tcl.replace("[get_bd_addr_spaces ps/Data]", "[get_bd_addr_spaces ps/Data] $reg_size"))
    assert any("no such variable" in p for p in check_block_design(project))
    project.tcl.write_text(tcl.replace("validate_bd_design", "validate_bd_desing"))
    assert any("validate_bd_desing" in p for p in check_block_design(project))
    project.tcl.write_text(re.sub(r"-offset \$reg_base", "-offset 0x40000000", tcl))
    assert any("registers are not placed" in p for p in check_block_design(project))
    project.tcl.write_text(tcl.replace("VTAKIT_ALLOW_TIMING_FAILURE)]", "VTAKIT_ALLOW_TIMING_FAILURE)] && 0"))
    assert any("misses timing" in p for p in check_block_design(project))


def test_custom_config_project(tmp_path):
    cfg = HwConfig.preset("1x8")
    project = write_project("pynq-z2", cfg, tmp_path)
    assert project.stem == "vtakit_pynq_z2_1x8" and check_project(project, yosys=False) == []
