"""vtakit.hw: the accelerator as SystemVerilog RTL.

`gen` writes the configuration package the RTL reads its parameters from,
`build` turns RTL plus the simulation harness into a cached Verilator library,
`device` runs programs on it behind the Device protocol (RtlDevice), `cosim`
compares it with the simulators and `synth` estimates FPGA resources with Yosys.
"""

from vtakit.hw.device import RtlDevice

__all__ = ["RtlDevice"]
