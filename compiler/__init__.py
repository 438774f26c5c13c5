"""vtakit.compiler: from ONNX networks and operators to programs for the accelerator and the hosts.

The folders are the pipeline (`pipeline.compile_module` runs the named steps of `pipeline.PIPELINE`):
`frontend` (ONNX in) -> `ir` (the graph) -> `passes` -> `quant` (int8) ->
`passes.partition`/`lower` -> `module` (the `.vtamod` artifact, its DRAM plan and
runner).  `ops` is the op registry every step consults; `backends` generate code
(`vta`, `cpu`, `cuda`, shared `host` checks); `zoo` builds test networks.
"""
