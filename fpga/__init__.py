"""The FPGA side: PYNQ driver, a simulated board backed by the RTL, board presets and the Vivado
project generator.

The names below load their modules on first use, so `vtakit.hw.boards` or the project
generator never import pynq (which the driver and the simulated board need). The board
presets live in `vtakit.hw.boards` (the RTL side needs them too) and are re-exported here.
"""

from importlib import import_module

_EXPORTS = {
    "BOARDS": "vtakit.hw.boards", "BoardPreset": "vtakit.hw.boards", "board": "vtakit.hw.boards",
    "PynqDevice": "vtakit.fpga.driver",
    "SimBoard": "vtakit.fpga.simboard", "simulated_pynq": "vtakit.fpga.simboard",
    "write_sim_overlay": "vtakit.fpga.simboard",
    "write_project": "vtakit.fpga.project", "check_project": "vtakit.fpga.project_checks",
    "board_check": "vtakit.fpga.selftest",
    "RegisterMap": "vtakit.fpga.regmap",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'vtakit.fpga' has no attribute {name!r}")


__all__ = list(_EXPORTS)
