"""vtakit.compiler: from ONNX networks and operators to programs for the accelerator and the hosts.

`graph` takes a network (ONNX front end, passes, quantization, partitioning,
DRAM plan, modules) and feeds three backends: `vta` (the accelerator's operator
compiler: schedules, loop nests, lowering, instruction streams, runtime), `cpu`
(llvmlite host kernels) and `cuda` (GPU kernels).  `zoo` builds test networks.
"""
