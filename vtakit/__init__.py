"""vtakit: a workbench for co-designing a VTA-style accelerator and its compiler.

The import root re-exports what most users reach for first; the layers live in
`vtakit.isa`, `vtakit.sim`, `vtakit.hw`, `vtakit.compiler`, `vtakit.scheduling` and
`vtakit.fpga`.
"""

from vtakit import errors
from vtakit.errors import (
    BudgetExceeded, CompileError, ConfigError, DeadlockError, DeviceError, DeviceTimeout, IsaError, RtlError,
    SimError, VtaError, needs_full_install, pc_side_missing,
)
from vtakit.compiler.options import CompileOptions
from vtakit.isa import DEFAULT_PRESET, HwConfig

_MISSING = ""  # the PC-side package a board's runtime lacks (compiling needs the full install)
try:
    from vtakit.compiler.frontend.torch_module import exported, is_torch_module
    from vtakit.compiler.pipeline import compile_module
    from vtakit.scheduling.log import tuning_context
except ImportError as missing:  # a board's runtime (the `board` extra): modules load and run, nothing compiles
    _MISSING = pc_side_missing(missing)

__version__ = "0.1.0"


def compile(model, config=DEFAULT_PRESET, options: CompileOptions | None = None, *, calibrate=None,
            tuning_log=None, example_inputs=None, cache: bool | None = None, **keywords):
    """Compile an ONNX model (path, bytes or onnx.ModelProto) into a module that `.run(inputs)`.

    A torch.nn.Module is exported first by torch's default `torch.onnx.export` with `example_inputs`
    (the forward's arguments: an array or tensor, or a tuple of them), as a user would export it; its
    inputs keep the forward's parameter names.

    calibrate: a list of samples, each an array for a single-input model or a dict by input name
    (None calibrates on seeded random inputs).  tuning_log: a `vtakit tune` log (or a list of them)
    whose best schedules the convolutions use.  options: a vtakit.compiler.options.CompileOptions;
    `keywords` set any of its fields or its QuantOptions' by name: target ("vta": int8 for the
    accelerator of `config`; "cpu" / "cuda": the float graph on the host / the GPU), host ("cuda":
    a "vta" module's host tasks on the GPU), input_shapes, partition_options, schedules, seed,
    calibration ("search": exponents judged at the outputs), keep_float, keep_float_until, ...
    (see vtakit.compiler.pipeline.compile_module).  cache=False compiles afresh; by default an unchanged
    compile loads the module stored on disk (~/.cache/vtakit or $VTAKIT_CACHE_DIR; vtakit.compiler.cache;
    skipped with a tuning log)."""
    if _MISSING:
        raise needs_full_install("compiling", _MISSING)
    if is_torch_module(model):
        with exported(model, example_inputs) as path, tuning_context(tuning_log):
            return compile_module(path, config, options, calibrate=calibrate, cache=cache, **keywords)
    if example_inputs is not None:
        raise CompileError("example_inputs are for a torch.nn.Module; an ONNX model declares its inputs")
    with tuning_context(tuning_log):
        return compile_module(model, config, options, calibrate=calibrate, cache=cache, **keywords)


__all__ = [
    "HwConfig", "errors", "VtaError", "ConfigError", "IsaError", "SimError", "DeadlockError",
    "CompileError", "RtlError", "DeviceError", "DeviceTimeout", "BudgetExceeded", "__version__", "compile",
]
