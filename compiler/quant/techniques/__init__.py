"""Quantization techniques, one per module, each registered with its option and the stage it runs at
(`registry.py`; `catalog.py` imports them all).

`channel_scales` (per-channel weight exponents), `channel_fill` (host-quantized
inputs channel by channel), `equalize` (cross-layer equalization, bias correction),
`range_scale` (scales between powers of two), `fixed_point` (per-channel fixed-point
requantization), `weight_rounding` (GPTQ-style rounding), `wide_residual` (wider
residual adds).  `channel_scales` and `fixed_point` are parts of the int8 rewrite
(`quant/quantize.py`) rather than registered steps.
"""
