"""small_cnn: a 32x32 network that runs in milliseconds yet touches many op kinds.

It exists for frontend and end-to-end tests: branches joined by Concat, a
ShuffleNet-style channel shuffle (Reshape with constant shapes around a
Transpose), a residual Add, an explicit Pad before a Conv, a per-channel Mul, a
NCHW -> NHWC -> NCHW Transpose pair that cancels, and a Softmax head.
"""

from __future__ import annotations

import numpy as np
import onnx

from .builder import GraphBuilder

IMAGE_SHAPE = (3, 32, 32)
NUM_CLASSES = 10


def small_cnn(seed: int = 0, batch: int = 1, opset: int = 13) -> onnx.ModelProto:
    """Input "data" (batch, 3, 32, 32), output "probs" (batch, 10)."""
    b = GraphBuilder("small_cnn", seed=seed, opset=opset)
    x = b.input("data", (batch, *IMAGE_SHAPE))
    x = b.conv(x, 16, 3, pad=1, name="stem.conv")
    x = b.batch_norm(x, name="stem.bn")
    x = b.relu(x, name="stem.relu")
    x = b.max_pool(x, 2, 2, name="stem.pool")                                     # 16 x 16 x 16

    one = b.conv(x, 16, 1, bias=True, name="branch1.conv")
    one = b.relu(one, name="branch1.relu")
    three = b.pad(x, (1, 1, 1, 1), name="branch3.pad")
    three = b.conv(three, 16, 3, bias=True, name="branch3.conv")
    three = b.relu(three, name="branch3.relu")
    x = b.concat([one, three], axis=1, name="concat")                             # 32 x 16 x 16

    # Channel shuffle: interleave the two branches' channels; 0 keeps the batch size.
    x = b.reshape(x, (0, 2, 16, 16, 16), name="shuffle.split")
    x = b.transpose(x, (0, 2, 1, 3, 4), name="shuffle.swap")
    x = b.reshape(x, (0, 32, 16, 16), name="shuffle.merge")

    y = b.conv(x, 32, 3, pad=1, name="res.conv")
    y = b.batch_norm(y, name="res.bn", gamma=0.5)
    x = b.add(x, y, name="res.add")
    x = b.relu(x, name="res.relu")
    factor = b.rng.uniform(0.5, 1.5, size=(1, 32, 1, 1)).astype(np.float32)
    x = b.mul(x, factor, name="scale")
    x = b.avg_pool(x, 2, 2, name="pool")                                          # 32 x 8 x 8

    x = b.transpose(x, (0, 2, 3, 1), name="to_nhwc")
    x = b.transpose(x, (0, 3, 1, 2), name="to_nchw")
    x = b.conv(x, 64, 3, stride=2, pad=1, name="down.conv")
    x = b.batch_norm(x, name="down.bn")
    x = b.relu(x, name="down.relu")                                               # 64 x 4 x 4

    x = b.global_avg_pool(x, name="gap")
    x = b.flatten(x, name="flatten")
    x = b.gemm(x, NUM_CLASSES, name="fc", out="logits", center=True)
    b.softmax(x, name="softmax", out="probs")
    doc = f"small_cnn: seeded weights (seed {seed}), BatchNorm/classifier calibrated on noise. Not trained."
    return b.model(["probs"], doc=doc, metadata={"zoo.name": "small_cnn"})
