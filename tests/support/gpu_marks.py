"""Skips that say why: `needs_gpu` runs only with a CUDA GPU and driver, `needs_ptxas` only with ptxas.

`keep_on_failure` writes a failing GPU check's arrays (inputs, and the outputs once the test adds
them) to $VTAKIT_GPU_FAILURES/<label>.npz, so a failure seen on a GPU machine can be replayed here
on `cuda.Emulator()`; without that variable it only re-raises.
"""

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vtakit.compiler.backends import cuda

GPU_OK, GPU_REASON = cuda.gpu_available()
needs_gpu = pytest.mark.skipif(not GPU_OK, reason=GPU_REASON)
needs_ptxas = pytest.mark.skipif(cuda.find_ptxas() is None,
                                 reason="ptxas is not on the PATH: the generated PTX is not assembled")

FAILURES_ENV = "VTAKIT_GPU_FAILURES"


@contextmanager
def keep_on_failure(label: str, **kept: Any) -> Iterator[dict[str, Any]]:
    """Yields `kept` (arrays and plain values; the test may add more); if the block raises, saves them
    with the error text as one .npz under $VTAKIT_GPU_FAILURES and re-raises."""
    try:
        yield kept
    except Exception as exc:
        folder = os.environ.get(FAILURES_ENV)
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            arrays = {k: v if isinstance(v, np.ndarray) else np.array(repr(v)) for k, v in kept.items()}
            arrays["error"] = np.array(f"{type(exc).__name__}: {exc}"[:4000])
            np.savez(Path(folder) / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', label)}.npz", **arrays)
        raise
