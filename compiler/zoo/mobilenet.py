"""MobileNet v1 (Howard et al., 2017) at 224x224, built node by node with seeded weights.

Depthwise convolutions (group = channels) and ReLU6 are what set it apart from
ResNet for a compiler: a depthwise conv has no reduction over input channels, so
it maps to the accelerator's ALU or the host rather than the GEMM core.
"""

from __future__ import annotations

import onnx

from .builder import GraphBuilder
from vtakit.errors import ZooError

IMAGE_SHAPE = (3, 224, 224)
STEM_CHANNELS = 32
# (output channels, stride) of the 13 depthwise-separable blocks.
BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
          (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))
NUM_CLASSES = 1000


def scaled_channels(channels: int, width: float) -> int:
    """Channels times the width multiplier, kept a multiple of 8 (as the paper's models are)."""
    if width <= 0:
        raise ZooError(f"width must be positive, got {width}")
    return max(8, round(channels * width / 8) * 8)


def relu6(b: GraphBuilder, x: str, name: str) -> str:
    return b.clip(x, 0.0, 6.0, name=name)


def mobilenet_v1(seed: int = 0, batch: int = 1, opset: int = 13, width: float = 1.0) -> onnx.ModelProto:
    """MobileNet v1 (about 569 M multiply-accumulates at width 1.0); "data" -> "logits"."""
    b = GraphBuilder("mobilenet_v1", seed=seed, opset=opset)
    x = b.input("data", (batch, *IMAGE_SHAPE))
    x = b.conv(x, scaled_channels(STEM_CHANNELS, width), 3, stride=2, pad=1, name="conv0")
    x = b.batch_norm(x, name="conv0.bn")
    x = relu6(b, x, "conv0.relu6")
    for index, (channels, stride) in enumerate(BLOCKS):
        prefix = f"blocks.{index}"
        depth = b.channels(x)
        x = b.conv(x, depth, 3, stride=stride, pad=1, group=depth, name=f"{prefix}.dw")
        x = b.batch_norm(x, name=f"{prefix}.dw_bn")
        x = relu6(b, x, f"{prefix}.dw_relu6")
        x = b.conv(x, scaled_channels(channels, width), 1, name=f"{prefix}.pw")
        x = b.batch_norm(x, name=f"{prefix}.pw_bn")
        x = relu6(b, x, f"{prefix}.pw_relu6")
    x = b.global_avg_pool(x, name="avgpool")
    x = b.flatten(x, name="flatten")
    b.gemm(x, NUM_CLASSES, name="fc", out="logits")
    doc = (f"mobilenet_v1 width {width}: seeded He-normal weights (seed {seed}); BatchNorm "
           "statistics and classifier calibrated on seeded standard-normal inputs. Not trained.")
    return b.model(["logits"], doc=doc, metadata={"zoo.name": "mobilenet_v1", "zoo.width": f"{width:g}"})
