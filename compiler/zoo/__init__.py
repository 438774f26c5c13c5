"""vtakit.compiler.zoo: ONNX models for testing and benchmarking the compiler.

Built in code with seeded weights, so nothing is downloaded: ResNet-18/34 and
MobileNet v1 at ImageNet size (random weights, BatchNorm calibrated so every
layer sees O(1) activations), `small_cnn` (many op kinds, milliseconds to run),
and `digits_cnn`, the one trained model (sklearn digits), whose held-out
accuracy is recorded beside it.

    model = zoo.build("resnet18", seed=0, batch=1, opset=13)
    zoo.save("small_cnn", "small.onnx")
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike

import onnx

from .counting import macs
from .digits import digits_cnn, digits_data, digits_record
from .mobilenet import mobilenet_v1
from .resnet import resnet18, resnet34
from .small import small_cnn
from vtakit.errors import ZooError

_BUILDERS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": resnet18,
    "resnet34": resnet34,
    "mobilenet_v1": mobilenet_v1,
    "small_cnn": small_cnn,
    "digits_cnn": digits_cnn,
}
_IMAGE_SHAPES = {"resnet18": (3, 224, 224), "resnet34": (3, 224, 224), "mobilenet_v1": (3, 224, 224),
                 "small_cnn": (3, 32, 32), "digits_cnn": (1, 8, 8)}
NAMES: tuple[str, ...] = tuple(_BUILDERS)


def _known(name: str) -> str:
    if name not in _BUILDERS:
        raise ZooError(f"unknown zoo model {name!r}; known: {', '.join(NAMES)}")
    return name


def build(name: str, **kw) -> onnx.ModelProto:
    """The named model; keyword arguments go to its builder (seed, batch, opset, ...)."""
    return _BUILDERS[_known(name)](**kw)


def input_shape(name: str, batch: int = 1) -> tuple[int, ...]:
    """Shape of the model's single input "data" (NCHW, float32)."""
    return (batch, *_IMAGE_SHAPES[_known(name)])


def save(name: str, path: str | PathLike, **kw) -> onnx.ModelProto:
    """Build the named model and write it to `path`; returns the model."""
    model = build(name, **kw)
    onnx.save(model, str(path))
    return model


__all__ = [
    "NAMES",
    "build",
    "digits_cnn",
    "digits_data",
    "digits_record",
    "input_shape",
    "macs",
    "mobilenet_v1",
    "resnet18",
    "resnet34",
    "save",
    "small_cnn",
]
