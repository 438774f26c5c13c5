"""vtakit: a workbench for co-designing a VTA-style accelerator and its compiler.

The import root re-exports what most users reach for first; the layers live in
`vtakit.isa`, `vtakit.sim` (and, as they arrive, `vtakit.hw`, `vtakit.compiler`,
`vtakit.scheduling`, `vtakit.fpga`).
"""

from vtakit import errors
from vtakit.errors import (
    CompileError, ConfigError, DeadlockError, DeviceError, DeviceTimeout, IsaError, RtlError,
    SimError, VtaError,
)
from vtakit.isa import HwConfig

__version__ = "0.1.0"

__all__ = [
    "HwConfig", "errors", "VtaError", "ConfigError", "IsaError", "SimError", "DeadlockError",
    "CompileError", "RtlError", "DeviceError", "DeviceTimeout", "__version__",
]
