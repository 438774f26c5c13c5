"""The accelerator's control registers as a driver on the PS sees them, in both flavours.

VTA's register map (ISA.md, "PYNQ register map") has four blocks, one per module: fetch,
load, compute, store.  This project's RTL serves them from one AXI-Lite slave, 4 KiB apart
(`vtakit` flavour: one IP at the board's register base).  VTA's HLS bitstreams have four
separate HLS IPs with the same offsets inside each (`vta-hls` flavour; VTA places them at
0x43C00000 + 0x1000*k on PYNQ and 0xA0000000 + 0x1000*k on Ultra96/ZCU104, i.e. the same
addresses).  Which flavour an overlay has is read from its ip_dict (the .hwh's IP types).
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import DeviceError

BLOCK_SPAN = 0x1000
"""Bytes of register space per module (VTA's ip_reg_map_range)."""
MODULES = ("fetch", "load", "compute", "store")

VTAKIT, VTA_HLS = "vtakit", "vta-hls"

# Control-register values of VTA's driver: fetch starts once, the data modules auto-restart
# (HLS's ap_start | auto_restart) and are switched back off after the run.
START, AUTORESTART, AUTORESTART_OFF = 0x1, 0x81, 0x0
CTRL_DONE = 1 << 1
"""Bit 1 of a control register: ap_done (HLS), FINISH has executed (vtakit)."""

# The packaged IP's identity (the Tcl packages the RTL under this VLNV) and VTA's HLS IPs'.
VTAKIT_VLNV = ("vtakit.org", "vtakit", "vta")
VTA_HLS_VENDOR_LIBRARY = ("xilinx.com", "hls")


@dataclass(frozen=True)
class Register:
    module: str
    name: str
    offset: int
    """Byte offset inside the module's 4 KiB block."""
    access: str
    description: str
    vtakit_only: bool = False
    """Status this project's RTL adds; VTA's HLS IPs do not have it."""


REGISTERS: tuple[Register, ...] = (
    Register("fetch", "CONTROL", 0x00, "read-write",
             "write 1: start; reads bit 0 running, bit 1 done, bit 2 idle"),
    Register("fetch", "INSN_COUNT", 0x10, "read-write", "instructions to fetch"),
    Register("fetch", "INSN_ADDR", 0x18, "read-write", "physical byte address of the first instruction"),
    Register("fetch", "ERROR", 0x20, "read-only", "bit 0: halted on an error; bits 7:4 its code", True),
    Register("fetch", "ERROR_INDEX", 0x24, "read-only", "index of the instruction that failed", True),
    Register("fetch", "CYCLES_LO", 0x28, "read-only", "cycles since start, low word", True),
    Register("fetch", "CYCLES_HI", 0x2C, "read-only", "cycles since start, high word", True),
    Register("load", "CONTROL", 0x00, "read-write", "0x81 auto-restart (VTA HLS); ignored by vtakit"),
    Register("load", "INP_ADDR", 0x10, "read-write", "physical byte base of INP transfers"),
    Register("load", "WGT_ADDR", 0x18, "read-write", "physical byte base of WGT transfers"),
    Register("compute", "CONTROL", 0x00, "read-write", "0x81 auto-restart (VTA HLS); ignored by vtakit"),
    Register("compute", "DONE", 0x18, "read-only", "1 when FINISH has executed"),
    Register("compute", "UOP_ADDR", 0x20, "read-write", "physical byte base of UOP loads"),
    Register("compute", "ACC_ADDR", 0x28, "read-write", "physical byte base of ACC / ACC_8BIT loads"),
    Register("store", "CONTROL", 0x00, "read-write", "0x81 auto-restart (VTA HLS); ignored by vtakit"),
    Register("store", "OUT_ADDR", 0x10, "read-write", "physical byte base of STORE transfers"),
)
_BY_NAME = {(r.module, r.name): r for r in REGISTERS}

# Base-address registers and the memory types they relocate (ISA.md: byte address = base +
# dram_base * element bytes).  The driver writes the DRAM image's physical address into all of them.
BASE_REGISTERS = (("load", "INP_ADDR"), ("load", "WGT_ADDR"), ("compute", "UOP_ADDR"),
                  ("compute", "ACC_ADDR"), ("store", "OUT_ADDR"))


def register(module: str, name: str) -> Register:
    try:
        return _BY_NAME[(module, name)]
    except KeyError:
        raise DeviceError(f"no register {module}.{name} in VTA's register map") from None


@dataclass(frozen=True)
class RegisterMap:
    """Where each module's 4 KiB register block sits in the PS's physical address space."""

    flavour: str
    bases: tuple[int, int, int, int]
    """Physical addresses of the fetch, load, compute and store blocks."""

    @classmethod
    def vtakit(cls, base: int) -> "RegisterMap":
        return cls(VTAKIT, tuple(base + BLOCK_SPAN * k for k in range(4)))

    @classmethod
    def vta_hls(cls, fetch: int, load: int, compute: int, store: int) -> "RegisterMap":
        return cls(VTA_HLS, (fetch, load, compute, store))

    def base(self, module: str) -> int:
        return self.bases[MODULES.index(module)]

    def describe(self) -> str:
        return f"{self.flavour}: " + ", ".join(f"{m} {b:#x}" for m, b in zip(MODULES, self.bases))


def _vlnv(entry: dict) -> tuple[str, ...]:
    return tuple(str(entry.get("type", "")).split(":"))


def discover(ip_dict: dict) -> RegisterMap:
    """The register map of an overlay from its ip_dict (what pynq parsed out of the .hwh)."""
    ours = [(name, e) for name, e in ip_dict.items() if _vlnv(e)[:3] == VTAKIT_VLNV and "phys_addr" in e]
    hls = {}
    for name, e in ip_dict.items():
        vlnv = _vlnv(e)
        if vlnv[:2] == VTA_HLS_VENDOR_LIBRARY and len(vlnv) > 2 and vlnv[2] in MODULES and "phys_addr" in e:
            hls.setdefault(vlnv[2], []).append(name)
    if len(ours) == 1 and not hls:
        name, entry = ours[0]
        if entry.get("addr_range", 0) < BLOCK_SPAN * len(MODULES):
            raise DeviceError(f"the overlay maps only {entry.get('addr_range')} bytes for {name}; "
                              f"its four register blocks need {BLOCK_SPAN * len(MODULES):#x}")
        return RegisterMap.vtakit(int(entry["phys_addr"]))
    if not ours and set(hls) == set(MODULES) and all(len(v) == 1 for v in hls.values()):
        return RegisterMap.vta_hls(*(int(ip_dict[hls[m][0]]["phys_addr"]) for m in MODULES))
    seen = ", ".join(f"{n} ({e.get('type', '?')})" for n, e in ip_dict.items()) or "nothing"
    raise DeviceError(f"the overlay has no (or more than one) VTA accelerator: expected one "
                      f"{':'.join(VTAKIT_VLNV)} IP or VTA's four HLS IPs fetch/load/compute/store; "
                      f"its ip_dict has {seen}")


def pl_clock_mhz(ip_dict: dict) -> float | None:
    """The PL clock 0 the overlay's PS generates (achieved figure where the .hwh has it)."""
    for entry in ip_dict.values():
        vlnv = _vlnv(entry)
        params = entry.get("parameters") or {}
        if len(vlnv) > 2 and vlnv[2] == "processing_system7":
            keys = ("PCW_ACT_FPGA0_PERIPHERAL_FREQMHZ", "PCW_FPGA0_PERIPHERAL_FREQMHZ")
        elif len(vlnv) > 2 and vlnv[2] == "zynq_ultra_ps_e":
            keys = ("PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ", "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ")
        else:
            continue
        for key in keys:
            try:
                return float(params[key])
            except (KeyError, TypeError, ValueError):
                continue
    return None
