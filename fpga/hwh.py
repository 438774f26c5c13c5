"""Hardware-handoff (.hwh) files for simulated overlays.

Vivado writes a .hwh next to every bitstream: the block design's IPs, their address windows
and the PS's settings; `pynq.Overlay` builds its ip_dict and clock_dict from it.  The simulated
board needs the same so that the driver finds the accelerator through pynq's own parser, exactly
as on a board.  This module writes the subset of the format pynq's parser (pynqmetadata) reads:
the PS with its clock parameters and ports, the accelerator IP(s) with their register blocks,
and the address map between them.  It describes the block design `fpga.project` builds.
"""

from __future__ import annotations

import re
import time
from xml.etree import ElementTree as ET

from vtakit.hw.boards import PS_IP, ZYNQ, BoardPreset
from vtakit.fpga.overlay import CONFIG_PARAMETER, FINGERPRINT_PARAMETER
from vtakit.fpga.regmap import BLOCK_SPAN, MODULES, REGISTERS, VTA_HLS, VTAKIT, VTAKIT_VLNV, RegisterMap
from vtakit.isa.config import HwConfig

AXI_MM = "xilinx.com:interface:aximm:1.0"
PS_SOURCE_PLL_MHZ = 1000.0
"""IO PLL rate the simulated PS divides down to the PL clocks."""
VTAKIT_INSTANCE = "vta_0"
# VTA's HLS IPs: instance, AXI-Lite interface and memory master(s) of each module.
VTA_HLS_MASTERS = {"fetch": ("m_axi_ins_port",), "load": ("m_axi_data_port",),
                   "compute": ("m_axi_uop_port", "m_axi_data_port"), "store": ("m_axi_data_port",)}


def ps_instance(board: BoardPreset) -> str:
    return "processing_system7_0" if board.ps == ZYNQ else "zynq_ultra_ps_e_0"


def clock_divisors(mhz: float) -> tuple[int, int, float]:
    """Two PL-clock divisors from the source PLL and the rate they achieve."""
    total = max(1, round(PS_SOURCE_PLL_MHZ / mhz))
    div0 = next(d for d in range(min(total, 63), 0, -1) if total % d == 0)
    return div0, total // div0, PS_SOURCE_PLL_MHZ / total


def ps_parameters(board: BoardPreset, clock_mhz: float) -> dict[str, str]:
    """The PS parameters pynq reads: PL clock enables, divisors, sources and rates (clock 0 only)."""
    div0, div1, actual = clock_divisors(clock_mhz)
    params: dict[str, str] = {}
    for k in range(4):
        on = k == 0
        if board.ps == ZYNQ:
            params[f"PCW_FPGA_FCLK{k}_ENABLE"] = str(int(on))
            params[f"PCW_FCLK{k}_PERIPHERAL_DIVISOR0"] = str(div0 if on else 1)
            params[f"PCW_FCLK{k}_PERIPHERAL_DIVISOR1"] = str(div1 if on else 1)
            params[f"PCW_FCLK{k}_PERIPHERAL_CLKSRC"] = "IO PLL"
            params[f"PCW_FPGA{k}_PERIPHERAL_FREQMHZ"] = f"{clock_mhz:g}" if on else "50"
            params[f"PCW_ACT_FPGA{k}_PERIPHERAL_FREQMHZ"] = f"{actual:.6f}" if on else "10.000000"
        else:
            prefix = f"PSU__CRL_APB__PL{k}_REF_CTRL__"
            params[f"PSU__FPGA_PL{k}_ENABLE"] = str(int(on))
            params[prefix + "DIVISOR0"] = str(div0 if on else 1)
            params[prefix + "DIVISOR1"] = str(div1 if on else 1)
            params[prefix + "SRCSEL"] = "IOPLL"
            params[prefix + "FREQMHZ"] = f"{clock_mhz:g}" if on else "100"
            params[prefix + "ACT_FREQMHZ"] = f"{actual:.6f}" if on else "100.000000"
    return params


def _module(parent: ET.Element, instance: str, vlnv: str, modtype: str, params: dict[str, str],
            **attrs: str) -> ET.Element:
    mod = ET.SubElement(parent, "MODULE", FULLNAME=f"/{instance}", INSTANCE=instance, MODTYPE=modtype,
                        VLNV=vlnv, IPTYPE="PERIPHERAL", IS_ENABLE="1", **attrs)
    plist = ET.SubElement(mod, "PARAMETERS")
    for name, value in params.items():
        ET.SubElement(plist, "PARAMETER", NAME=name, VALUE=value)
    return mod


def _bus(mod: ET.Element, interfaces: list[tuple[str, str]]) -> None:
    ET.SubElement(mod, "PORTS")
    buses = ET.SubElement(mod, "BUSINTERFACES")
    for name, kind in interfaces:
        ET.SubElement(buses, "BUSINTERFACE", BUSNAME=f"{mod.get('INSTANCE')}_{name}", NAME=name, TYPE=kind,
                      VLNV=AXI_MM)


def _range(memmap: ET.Element, block: str, base: int, size: int, instance: str, master: str, slave: str,
           memtype: str) -> None:
    ET.SubElement(memmap, "MEMRANGE", ADDRESSBLOCK=block, BASENAME="C_BASEADDR", BASEVALUE=f"0x{base:08X}",
                  HIGHNAME="C_HIGHADDR", HIGHVALUE=f"0x{base + size - 1:08X}", INSTANCE=instance,
                  IS_DATA="TRUE", IS_INSTRUCTION="TRUE", MASTERBUSINTERFACE=master, MEMTYPE=memtype,
                  SLAVEBUSINTERFACE=slave)


def _registers(mod: ET.Element, interface: str, span: int, modules: tuple[str, ...], with_module_offset: bool,
               vtakit_status: bool) -> None:
    blocks = ET.SubElement(mod, "ADDRESSBLOCKS")
    block = ET.SubElement(blocks, "ADDRESSBLOCK", ACCESS="read-write", INTERFACE=interface, NAME="reg0",
                          RANGE=str(span), USAGE="register")
    regs = ET.SubElement(block, "REGISTERS")
    for r in REGISTERS:
        if r.module not in modules or (r.vtakit_only and not vtakit_status):
            continue
        offset = r.offset + (MODULES.index(r.module) * BLOCK_SPAN if with_module_offset else 0)
        reg = ET.SubElement(regs, "REGISTER", NAME=f"{r.module.upper()}_{r.name}" if with_module_offset else r.name)
        for name, value in (("DESCRIPTION", r.description), ("ADDRESS_OFFSET", f"0x{offset:x}"),
                            ("SIZE", "32"), ("ACCESS", r.access), ("IS_ENABLED", "true")):
            ET.SubElement(reg, "PROPERTY", NAME=name, VALUE=value)


def hwh_text(board: BoardPreset, cfg: HwConfig, regmap: RegisterMap, design: str) -> str:
    """The .hwh of the block design for `cfg` on `board` with the accelerator at `regmap`."""
    root = ET.Element("EDKSYSTEM", EDWVERSION="1.2", TIMESTAMP=time.strftime("%a %b %d %H:%M:%S %Y"),
                      VIVADOVERSION="vtakit simulated board")
    device, package, speed = re.match(r"xc(7z\d+|zu\d+[a-z]+)-?([a-z]+\d+)-(\d)", board.part).groups()
    ET.SubElement(root, "SYSTEMINFO", ARCH="zynq" if board.ps == ZYNQ else "zynquplus", DEVICE=device,
                  NAME=design, PACKAGE=package, SPEEDGRADE=f"-{speed}")
    ET.SubElement(root, "EXTERNALPORTS")
    ET.SubElement(root, "EXTERNALINTERFACES")
    modules = ET.SubElement(root, "MODULES")
    ps = ps_instance(board)
    ps_vlnv = PS_IP[board.ps] + (":5.5" if board.ps == ZYNQ else ":3.3")
    ps_mod = _module(modules, ps, ps_vlnv, ps_vlnv.split(":")[2], ps_parameters(board, cfg.clock_mhz), IS_PL="FALSE")
    ps_map = ET.SubElement(ps_mod, "MEMORYMAP")
    mem_port = board.mem_ports[0]
    ddr = ("HP0_DDR_LOWOCM" if board.ps == ZYNQ else "HP0_DDR_LOW", 0, min(board.ddr_bytes, 0x8000_0000))
    params = {CONFIG_PARAMETER: cfg.label, FINGERPRINT_PARAMETER: cfg.fingerprint(),
              "C_M_AXI_DATA_WIDTH": str(cfg.bus_bytes * 8)}
    if regmap.flavour == VTAKIT:
        _range(ps_map, "reg0", regmap.bases[0], 1 << 16, VTAKIT_INSTANCE, board.ctrl_port, "s_axil", "REGISTER")
        vta = _module(modules, VTAKIT_INSTANCE, ":".join(VTAKIT_VLNV) + ":1.0", "vta", params)
        _registers(vta, "s_axil", 1 << 16, MODULES, True, True)
        _range(ET.SubElement(vta, "MEMORYMAP"), ddr[0], ddr[1], ddr[2], ps, "m_axi", mem_port, "MEMORY")
        _bus(vta, [("s_axil", "SLAVE"), ("m_axi", "MASTER")])
    elif regmap.flavour == VTA_HLS:
        for module, base in zip(MODULES, regmap.bases):
            instance = f"{module}_0"
            _range(ps_map, "Reg", base, BLOCK_SPAN, instance, board.ctrl_port, "s_axi_CONTROL_BUS", "REGISTER")
            mod = _module(modules, instance, f"xilinx.com:hls:{module}:1.0", module, params)
            _registers(mod, "s_axi_CONTROL_BUS", BLOCK_SPAN, (module,), False, False)
            memmap = ET.SubElement(mod, "MEMORYMAP")
            for master in VTA_HLS_MASTERS[module]:
                _range(memmap, ddr[0], ddr[1], ddr[2], ps, master, mem_port, "MEMORY")
            _bus(mod, [("s_axi_CONTROL_BUS", "SLAVE")] + [(m, "MASTER") for m in VTA_HLS_MASTERS[module]])
    _bus(ps_mod, [(board.ctrl_port, "MASTER"), (mem_port, "SLAVE")])
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8" standalone="no" ?>\n' + ET.tostring(root, encoding="unicode") + "\n"
