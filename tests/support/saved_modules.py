"""A small compiled network saved to disk, for the tests that tamper with, fuzz or reload modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.module.container import write_module
from vtakit.compiler.module.signing import KEY_ENV


def saved_digits_module(folder: Path, seed: int) -> tuple[Path, np.ndarray, np.ndarray]:
    """(path of the saved `.vtamod`, an input, the logits it gives on fsim): digits_cnn on pynq,
    calibrated on two seeded samples."""
    rng = np.random.default_rng(seed)
    cal = [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(2)]
    module = vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=cal)
    path = module.save(folder / "d.vtamod")
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    return path, x, module.run(x, device="fsim")["logits"]


@contextmanager
def signing_key(key_file: Path) -> Iterator[None]:
    """Modules saved inside are signed with the key at `key_file` (made if missing): another
    machine's, or an attacker's; the session's key (tests/conftest.py) is back afterwards."""
    before = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = str(key_file)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = before


def attacker_save(path: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray], key_file: Path) -> Path:
    """`manifest` and `arrays` saved as an attacker would: every hash recomputed, signed with a key
    that is not this machine's (the attacker's own, at `key_file`)."""
    with signing_key(key_file):
        write_module(path, manifest, arrays)
    return path
