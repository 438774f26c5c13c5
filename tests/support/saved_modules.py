"""A small compiled network saved to disk, for the tests that tamper with, fuzz or reload modules."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import vtakit
from vtakit.compiler import zoo


def saved_digits_module(folder: Path, seed: int) -> tuple[Path, np.ndarray, np.ndarray]:
    """(path of the saved `.vtamod`, an input, the logits it gives on fsim): digits_cnn on pynq,
    calibrated on two seeded samples."""
    rng = np.random.default_rng(seed)
    cal = [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(2)]
    module = vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=cal)
    path = module.save(folder / "d.vtamod")
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    return path, x, module.run(x, device="fsim")["logits"]
