"""vtakit.compiler.backends.vta: operators to VTA instruction streams (the accelerator backend).

`te` declares what an operator computes, `schedule` how to tile, place and
parallelise it (as data; `templates` and `heuristics` pick defaults, `dispatch`
takes tuned ones), `loopnest` is the IR a schedule yields (`affine`, `regions`
describe its accesses), `lowering` holds the steps `codegen` runs in the order
`lowering.lowering_steps()` lists, `program` is the result as plain data and
`runtime` runs it on any registered Device.  `ops` are the user-facing
operators, `reference` their numpy definitions, `layers` the reference layer
tables (ResNet-18's C1-C11) and `layer_runs` runs one of them on a device,
checked against numpy (`vtakit bench conv2d|dense`, the cycle-count tests).
"""
