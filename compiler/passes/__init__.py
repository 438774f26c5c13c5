"""Graph passes between import and the module, in the order `vtakit.compiler.pipeline` runs them.

`simplify` (constant folding, dead code, common subexpressions), `fold` (batch norm,
scales and pads into convolutions), `partition` (accelerator or host per node),
`fusion` (residual adds and max pools into accelerator tasks) and `lower` (one
quantized node into one relocatable accelerator program).
"""
