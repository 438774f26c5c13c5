"""A quantization technique as a newcomer adds one: this module, and its name in the import line of
compiler/quant/techniques/catalog.py (the registry's test imports it instead, and takes it back after).

Weight clipping: conv and dense weights clipped to SIGMAS standard deviations before quantization, so
one outlier does not set a layer's power-of-two weight exponent.  Changes the float model (the int8
graph is quantized from the clipped one).  docs/extending.md shows the same module.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.ir import Graph
from vtakit.compiler.ops import int8_rule
from vtakit.compiler.options import Choice, Option
from vtakit.compiler.quant.techniques.registry import Stage, Technique, register

SIGMAS = 4.0


class WeightClipMode(Choice):
    """Conv/dense weights clipped to SIGMAS standard deviations before quantization, or not."""
    __option__ = "weight_clip"
    OFF = "off"
    ON = "on"


def clip_weights(g: Graph, sigmas: float = SIGMAS) -> Graph:
    """A copy of `g` whose constant conv/dense weights lie within `sigmas` standard deviations of 0."""
    out = g.copy()
    for n in out.nodes:
        w = out.consts.get(n.inputs[1]) if int8_rule(n.op) == "weights" and len(n.inputs) > 1 else None
        if w is not None:
            bound = sigmas * float(np.std(w))
            out.consts[n.inputs[1]] = np.clip(w, -bound, bound).astype(w.dtype)
    return out


def weight_clip_stage(g: Graph, samples: list[dict[str, np.ndarray]], mode: WeightClipMode) -> Graph:
    """The FLOAT stage: the weights clipped where the option is on."""
    return clip_weights(g) if mode is WeightClipMode.ON else g


TECHNIQUE = register(Technique(
    "weight_clip", Stage.FLOAT, weight_clip_stage, order=5, doc="conv/dense weights clipped to 4 sigma",
    option=Option("weight_clip", WeightClipMode, WeightClipMode.OFF,
                  help="clip conv/dense weights to 4 standard deviations before quantization (default off)")))
