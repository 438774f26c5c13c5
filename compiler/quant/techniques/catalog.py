"""Every quantization technique that registers itself (`registry.register` at the end of its module):
importing this module registers them all.  Quantization (`quant/int8.py`) and the command line (its
flags) import it.

Adding a technique: its module under `techniques/`, and its name in the line below.
"""

from vtakit.compiler.quant.techniques import equalize, range_scale, channel_fill, weight_rounding, wide_residual  # noqa: F401
