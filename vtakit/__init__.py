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


def compile(model, config="pynq", target: str = "vta", calibrate=None, **options):
    """Compile an ONNX model (path, bytes or onnx.ModelProto) into a module that `.run(inputs)`.

    target "vta": int8 for the accelerator of `config` (calibrate: a list of samples, each an
    array for a single-input model or a dict by input name; None calibrates on seeded random
    inputs); "cpu": the float graph on the host.  Options: input_shapes, partition_options,
    schedules, seed (see vtakit.compiler.graph.compile_module)."""
    from vtakit.compiler.graph import compile_module

    return compile_module(model, config, target=target, calibrate=calibrate, **options)


__all__ = [
    "HwConfig", "errors", "VtaError", "ConfigError", "IsaError", "SimError", "DeadlockError",
    "CompileError", "RtlError", "DeviceError", "DeviceTimeout", "__version__", "compile",
]
