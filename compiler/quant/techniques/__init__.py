"""Quantization techniques, one per module, each switched by one compile option.

`channel_scales` (per-channel weight exponents), `channel_fill` (host-quantized
inputs channel by channel), `equalize` (cross-layer equalization, bias correction),
`range_scale` (scales between powers of two), `fixed_point` (per-channel fixed-point
requantization), `weight_rounding` (GPTQ-style rounding), `wide_residual` (wider
residual adds).
"""
