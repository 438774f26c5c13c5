"""Board presets (the one table of board facts: part, PS, ports, address map; hw.synth derives its
default parts from it): the facts about each PYNQ board that the driver, the simulated board and the
Vivado project need, tied to the HwConfig preset that runs on it.

Clock and memory-bus width are not repeated here: they are the HwConfig's (`clock_mhz`,
`bus_bytes`), so a bitstream, a compiled program and the cycle model cannot disagree about them.
What is here is what only the board knows: the FPGA part, the processing-system type and its
ports, where the PS maps the accelerator's registers, and how much DDR the PS has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vtakit.errors import ConfigError
from vtakit.isa.config import HwConfig

ZYNQ = "zynq"                   # Zynq-7000: processing_system7
ZYNQ_US = "zynq_ultra_ps_e"     # Zynq UltraScale+ MPSoC

# Per PS type: the Vivado IP, its clock / reset pins and the widest its memory ports go.
PS_IP = {ZYNQ: "xilinx.com:ip:processing_system7", ZYNQ_US: "xilinx.com:ip:zynq_ultra_ps_e"}
PS_MAX_HP_BITS = {ZYNQ: 64, ZYNQ_US: 128}


@dataclass(frozen=True)
class HostCpu:
    """A board's application processor as the report's estimate of host time assumes it.  The rates are
    stated assumptions for numpy-class kernels on one core, not measurements: a board-side figure from
    this machine's run would be meaningless, and no board is attached here."""

    name: str
    mhz: float
    gmacs: float             # float multiply-accumulates per second (1e9) in a matrix kernel
    gbytes: float            # bytes per second (1e9) read plus written by an element-wise or layout kernel
    transcendental_ns: float  # per element of exp, erf, tanh, sigmoid (softmax, GELU, SiLU)
    call_us: float           # per host node: the interpreter's dispatch


PS_CPU = {ZYNQ: HostCpu("Cortex-A9", 650, gmacs=0.5, gbytes=0.6, transcendental_ns=40, call_us=40),
          ZYNQ_US: HostCpu("Cortex-A53", 1200, gmacs=2.0, gbytes=2.0, transcendental_ns=12, call_us=12)}
"""Per processing-system type: the Zynq-7000's dual Cortex-A9 (650 MHz on the -1 parts, NEON 64-bit: a
2.6 GFLOP/s peak) and the UltraScale+ MPSoC's quad Cortex-A53 (1.2 GHz, NEON 128-bit); one core each."""


@dataclass(frozen=True)
class BoardPreset:
    """One board: part, PS, ports and address map; clock and bus width come from `config`."""

    name: str
    title: str
    part: str
    """Full Vivado part name (device, package, speed grade)."""
    config_preset: str
    """The HwConfig preset built for this board."""
    ps: str
    """ZYNQ or ZYNQ_US."""
    vivado_board_part: str
    """Board-file id; used when installed in Vivado (it sets the PS's DDR and MIO), else the part."""
    register_base: int
    """Physical address of the accelerator's AXI-Lite window (VTA's fetch base)."""
    ctrl_port: str
    """PS master port that reaches the registers."""
    mem_ports: tuple[str, ...]
    """PS slave port(s) the accelerator's AXI4 master reaches DDR through."""
    ddr_bytes: int

    @property
    def config(self) -> HwConfig:
        return HwConfig.preset(self.config_preset)

    @property
    def clock_mhz(self) -> float:
        return self.config.clock_mhz

    @property
    def bus_bits(self) -> int:
        return self.config.bus_bytes * 8

    @property
    def host_cpu(self) -> HostCpu:
        return PS_CPU[self.ps]

    @property
    def device(self) -> str:
        """Device without package and speed grade, e.g. `xc7z020` (hw.synth's part names)."""
        return re.match(r"xc(7z\d+|zu\d+[a-z]+)", self.part).group(0)

    def check_config(self, cfg: HwConfig) -> None:
        """ConfigError when `cfg` cannot be built for this board's memory port."""
        widest = PS_MAX_HP_BITS[self.ps]
        if cfg.bus_bytes * 8 > widest:
            raise ConfigError(f"{self.title}'s {self.mem_ports[0]} is at most {widest} bits wide; "
                              f"config {cfg.label} needs {cfg.bus_bytes * 8}", field="bus_bytes")

    def overlay_stem(self, cfg: HwConfig) -> str:
        """File stem of the .bit / .hwh / .json a project for `cfg` on this board produces."""
        return f"vtakit_{self.name}_{cfg.label}".replace("-", "_")


BOARDS: dict[str, BoardPreset] = {b.name: b for b in (
    BoardPreset("pynq-z1", "PYNQ-Z1", "xc7z020clg400-1", "pynq", ZYNQ,
                "www.digilentinc.com:pynq-z1:part0:1.0", 0x43C0_0000, "M_AXI_GP0", ("S_AXI_HP0",), 512 << 20),
    BoardPreset("pynq-z2", "PYNQ-Z2", "xc7z020clg400-1", "pynq", ZYNQ,
                "tul.com.tw:pynq-z2:part0:1.0", 0x43C0_0000, "M_AXI_GP0", ("S_AXI_HP0",), 512 << 20),
    BoardPreset("ultra96-v2", "Ultra96-V2", "xczu3eg-sbva484-1-i", "ultra96", ZYNQ_US,
                "avnet.com:ultra96v2:part0:1.2", 0xA000_0000, "M_AXI_HPM0_FPD", ("S_AXI_HP0_FPD",), 2 << 30),
    BoardPreset("zcu104", "ZCU104", "xczu7ev-ffvc1156-2-e", "zcu104", ZYNQ_US,
                "xilinx.com:zcu104:part0:1.1", 0xA000_0000, "M_AXI_HPM0_FPD", ("S_AXI_HP0_FPD",), 2 << 30),
)}


def board(name: "str | BoardPreset") -> BoardPreset:
    """A board preset by name (ConfigError naming the known ones otherwise)."""
    if isinstance(name, BoardPreset):
        return name
    try:
        return BOARDS[name]
    except KeyError:
        raise ConfigError(f"unknown board {name!r}; known boards: {', '.join(BOARDS)}", field="board") from None


def board_for(cfg: HwConfig) -> BoardPreset:
    """The first board whose preset is built for `cfg.target` (pynq -> PYNQ-Z1)."""
    for b in BOARDS.values():
        if b.config.target == cfg.target:
            return b
    raise ConfigError(f"no board preset for target {cfg.target!r}; boards: {', '.join(BOARDS)}", field="target")
