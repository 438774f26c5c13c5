"""ResNet v1 (He et al., 2015) for ImageNet, built node by node with seeded weights.

The layout matches torchvision's resnet18/resnet34 (and so VTA's benchmark
layers in WORKLOADS.md): 7x7/2 stem, 3x3/2 max-pool, four stages of basic blocks,
global average pooling and a 512 -> 1000 classifier.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from .builder import GraphBuilder

IMAGE_SHAPE = (3, 224, 224)
STAGE_CHANNELS = (64, 128, 256, 512)
STAGE_BLOCKS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
NUM_CLASSES = 1000
# Gamma of the BN closing each residual branch: the branch adds a unit-variance term to
# the shortcut in every block, so a smaller gamma keeps the running sum from growing.
RESIDUAL_GAMMA = 0.4


def basic_block(b: GraphBuilder, x: str, out_channels: int, stride: int, prefix: str) -> str:
    """conv3x3-BN-Relu-conv3x3-BN plus the shortcut (1x1/stride conv + BN when the shape changes)."""
    in_channels = b.channels(x)
    y = b.conv(x, out_channels, 3, stride=stride, pad=1, name=f"{prefix}.conv1")
    y = b.batch_norm(y, name=f"{prefix}.bn1")
    y = b.relu(y, name=f"{prefix}.relu1")
    y = b.conv(y, out_channels, 3, pad=1, name=f"{prefix}.conv2")
    y = b.batch_norm(y, name=f"{prefix}.bn2", gamma=RESIDUAL_GAMMA)
    shortcut = x
    if stride != 1 or in_channels != out_channels:
        shortcut = b.conv(x, out_channels, 1, stride=stride, name=f"{prefix}.downsample.conv")
        shortcut = b.batch_norm(shortcut, name=f"{prefix}.downsample.bn")
    y = b.add(y, shortcut, name=f"{prefix}.add")
    return b.relu(y, name=f"{prefix}.relu2")


def resnet(name: str, blocks: Sequence[int], *, seed: int = 0, batch: int = 1,
           opset: int = 13, centred: bool = False) -> onnx.ModelProto:
    """A basic-block ResNet with `blocks[i]` blocks in stage i; input "data", output "logits".
    `centred`: the classifier keeps only the input-dependent part of the logits (`GraphBuilder.gemm`'s
    center), the hard case for int8, whose error is then measured against that small signal alone."""
    b = GraphBuilder(name, seed=seed, opset=opset)
    x = b.input("data", (batch, *IMAGE_SHAPE))
    x = b.conv(x, 64, 7, stride=2, pad=3, name="conv1")
    x = b.batch_norm(x, name="bn1")
    x = b.relu(x, name="relu")
    x = b.max_pool(x, 3, 2, pad=1, name="maxpool")
    for stage, (channels, count) in enumerate(zip(STAGE_CHANNELS, blocks), start=1):
        for index in range(count):
            stride = 2 if stage > 1 and index == 0 else 1
            x = basic_block(b, x, channels, stride, f"layer{stage}.{index}")
    x = b.global_avg_pool(x, name="avgpool")
    x = b.flatten(x, name="flatten")
    b.gemm(x, NUM_CLASSES, name="fc", out="logits", center=centred)
    doc = (f"{name}: ResNet v1, seeded He-normal weights (seed {seed}); BatchNorm statistics "
           "and the classifier bias calibrated on seeded standard-normal inputs. Not trained.")
    return b.model(["logits"], doc=doc, metadata={"zoo.name": name})


def resnet18(seed: int = 0, batch: int = 1, opset: int = 13) -> onnx.ModelProto:
    """ResNet-18: stages [2, 2, 2, 2], about 1.8 G multiply-accumulates per image."""
    return resnet("resnet18", STAGE_BLOCKS["resnet18"], seed=seed, batch=batch, opset=opset)


def resnet34(seed: int = 0, batch: int = 1, opset: int = 13) -> onnx.ModelProto:
    """ResNet-34: stages [3, 4, 6, 3], about 3.6 G multiply-accumulates per image."""
    return resnet("resnet34", STAGE_BLOCKS["resnet34"], seed=seed, batch=batch, opset=opset)
