"""Code generators: `vta` (the accelerator: schedules, loop nests, lowering, instruction
streams, runtime), `cpu` (llvmlite host kernels), `cuda` (GPU kernels as PTX) and
`host` (the argument checks and geometry the two host backends share).
"""
