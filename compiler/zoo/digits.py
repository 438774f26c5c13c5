"""digits_cnn: the zoo's one trained model (scikit-learn's 8x8 digits, 10 classes).

Random-weight networks check that a compiler computes *something* the same way
as a reference; a trained one also shows whether quantization keeps what the
network learnt: its held-out accuracy is a figure to preserve.  The weights are
committed (`digits_cnn.onnx`, written by `train_digits.py`) with their record
(`digits_cnn.json`); scikit-learn is needed only for the data, not the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter

from .builder import GraphBuilder, check_opset
from vtakit.errors import ZooError

MODEL_PATH = Path(__file__).with_name("digits_cnn.onnx")
RECORD_PATH = Path(__file__).with_name("digits_cnn.json")
IMAGE_SHAPE = (1, 8, 8)
NUM_CLASSES = 10
TRAINED_OPSET = 13
SPLIT = "train_test_split(test_size=0.2, random_state=0, stratify=y)"
PREPROCESSING = "pixel values / 16.0 as float32 in [0, 1], shape (N, 1, 8, 8) NCHW"


def digits_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): the fixed split the model was trained and scored on."""
    try:
        from sklearn.datasets import load_digits  # lazy: sklearn (scikit-learn, the dev extra)
        from sklearn.model_selection import train_test_split  # lazy: sklearn
    except ImportError as exc:            # a dev dependency (pip install vtakit[dev])
        raise ImportError("digits_data() needs scikit-learn for the digits data set") from exc
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32).reshape(-1, *IMAGE_SHAPE)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test


def digits_record() -> dict:
    """What training recorded: accuracies, seed, split, epochs, preprocessing."""
    return json.loads(RECORD_PATH.read_text())


def digits_cnn(batch: int | None = None, opset: int = TRAINED_OPSET) -> onnx.ModelProto:
    """The trained model; batch None keeps the symbolic batch "N", an int fixes it.

    Its ops (Conv, Relu, MaxPool, Flatten, Gemm) mean the same from opset 11 to 21,
    so another opset is the committed graph converted by onnx's version converter.
    """
    model = onnx.load(str(MODEL_PATH))
    if opset != TRAINED_OPSET:
        model = onnx.version_converter.convert_version(model, check_opset(opset))
    if batch is not None:
        if not isinstance(batch, int) or batch < 1:
            raise ZooError(f"batch must be a positive int or None, got {batch!r}")
        for info in [*model.graph.input, *model.graph.output]:
            info.type.tensor_type.shape.dim[0].dim_value = batch     # clears dim_param "N"
    return model


def export_digits_cnn(params: dict[str, np.ndarray], calibration: np.ndarray,
                      opset: int = TRAINED_OPSET) -> tuple[onnx.ModelProto, np.ndarray]:
    """Trained numpy weights -> ONNX, plus the builder's numpy logits on `calibration`
    (the trainer compares them with its own forward pass before saving)."""
    b = GraphBuilder("digits_cnn", seed=0, opset=opset, calibration_batch=len(calibration))
    x = b.input("data", ("N", *IMAGE_SHAPE), calibration=calibration)
    for index, name in enumerate(("conv1", "conv2", "conv3"), start=1):
        weight = params[f"{name}.weight"]
        x = b.conv(x, weight.shape[0], 3, pad=1, name=name, weight=weight,
                   bias_value=params[f"{name}.bias"])
        x = b.relu(x, name=f"relu{index}")
        if name == "conv2":
            x = b.max_pool(x, 2, 2, name="pool")
    x = b.flatten(x, name="flatten")
    b.gemm(x, NUM_CLASSES, name="fc", out="logits", weight=params["fc.weight"],
           bias_value=params["fc.bias"])
    doc = "digits_cnn: trained on sklearn digits by vtakit.compiler.zoo.train_digits; see digits_cnn.json."
    model = b.model(["logits"], doc=doc, metadata={"zoo.name": "digits_cnn"})
    return model, b.values["logits"]
