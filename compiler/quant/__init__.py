"""Quantization: the float graph to power-of-two int8 for the accelerator.

`int8` is the entry point (`float_and_int8`: the weight-side techniques, calibration,
the layers kept float, then the rewrite), `quantize` the core rewrite (exponents,
requantizing shifts, precision rules), `calibration` chooses activation exponents from
samples, `exponent_search` judges them at the network's outputs, `recipe_search` sets
the knobs left "auto" (`recipe` is the recipe itself and how it is shown), `qdq` reads
the scales of models quantized elsewhere and `accuracy` compares float and int8 layer
by layer.  Each optional technique is one module under `techniques/`.
"""
