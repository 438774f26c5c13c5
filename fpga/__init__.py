"""The FPGA side: PYNQ driver, a simulated board backed by the RTL, board presets and the Vivado
project generator.

The names below load their modules on first use, so `vtakit.hw.boards` or the project
generator never import pynq (which the driver and the simulated board need).
"""

from importlib import import_module

_EXPORTS = {
    "BOARDS": "boards", "BoardPreset": "boards", "board": "boards",
    "PynqDevice": "driver",
    "SimBoard": "simboard", "simulated_pynq": "simboard", "write_sim_overlay": "simboard",
    "write_project": "project", "check_project": "checks", "board_check": "selftest",
    "RegisterMap": "regmap",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"vtakit.fpga.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'vtakit.fpga' has no attribute {name!r}")


__all__ = list(_EXPORTS)
