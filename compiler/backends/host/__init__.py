"""What the host backends share per operator: the argument checks, the specs and the geometry.

`backends/cpu` (llvmlite kernels) and `backends/cuda` (GPU kernels) validate
arguments and derive shapes here, then only emit code; a check or a window rule
written once holds for both.  `checks` (dtypes, ranks, integer options, the int8
requantization `Requant`, window lengths), `conv` (ConvGeometry), `pool` (window
geometry, average divisors), `layout` (layout dtypes, permutations, pad values,
concat axes) and `matmul` (broadcast batch offsets).
"""
