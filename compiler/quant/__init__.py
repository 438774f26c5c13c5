"""Quantization: the float graph to power-of-two int8 for the accelerator.

`quantize` is the core rewrite (exponents, requantizing shifts, precision rules),
`calibration` chooses activation exponents from samples, `exponent_search` judges
them at the network's outputs, `recipe` picks the knobs left "auto", `qdq` reads the
scales of models quantized elsewhere and `accuracy` compares float and int8 layer by
layer.  Each optional technique is one module under `techniques/`.
"""
