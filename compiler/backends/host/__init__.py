"""What the host backends share per operator: the argument checks, the specs and the geometry.

`backends/cpu` (llvmlite kernels) and `backends/cuda` (GPU kernels) validate
arguments and derive shapes here, then only emit code; a check or a window rule
written once holds for both (and for the numpy fallback, `cpu/numpy_kernels`).
`checks` (dtypes, ranks, integer options, weights and bias of a product, the int8
requantization `Requant` and output dtype, window lengths, reduction axes), `conv`
(`conv_operands`: every check of a conv2d call, and its ConvGeometry), `pool` (window
geometry, average divisors), `layout` (layout operands and dtypes, permutations, pad
widths and values, concat operands and axes, the packed layout's arguments),
`elementwise` (operands, broadcast shapes, clip bounds, batch norm's per-channel
factors) and `matmul` (MatMul and dense operands, broadcast batches and their offsets).
Checks take the backend's operand check as `checked` (numpy arrays by default, the
GPU's DeviceArrays in `backends/cuda`), so each message is written once.
"""
