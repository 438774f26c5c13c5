"""Exporting a torch module as its user would, once: torch's DEFAULT exporter (`torch.onnx.export(model, args,
path)`, which in torch 2.13 writes `model.onnx` plus `model.onnx.data`), cached under ~/.cache/vtakit/corpus
in a folder keyed by the model's name and the torch and transformers versions, so reruns do not re-export.

torch and transformers are the `corpus` extra, never a requirement of vtakit: without them `Unavailable`
says how to install them.  The exported files are never edited.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from tests.support.corpus.entry import Unavailable

CACHE_VAR = "VTAKIT_CORPUS_CACHE"
EXTRA = "pip install -e '.[corpus]' (or `make test-slow`)"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_dir(key: str) -> Path:
    """~/.cache/vtakit/corpus/<key> (or under VTAKIT_CORPUS_CACHE), made on first use."""
    root = Path(os.environ.get(CACHE_VAR) or Path.home() / ".cache" / "vtakit" / "corpus")
    path = root / key
    path.mkdir(parents=True, exist_ok=True)
    return path


def versions_key() -> str:
    return f"torch{_version('torch')}-transformers{_version('transformers')}"


def cached_export(name: str, build: Callable[[], tuple[Any, tuple]]) -> Path:
    """The path of `name`'s exported model.onnx, exported on the first call: `build()` returns (a torch module
    in eval mode, its example arguments).  A half-written export never lands (written in a temporary folder
    and renamed)."""
    if _version("torch") == "none":
        raise Unavailable(f"torch is not installed: {EXTRA}")
    folder = cache_dir(f"{name}-{versions_key()}")
    target = folder / "model.onnx"
    if target.is_file():
        return target
    import torch  # pyright: ignore[reportMissingImports]

    torch.manual_seed(0)
    model, args = build()
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{name}-"))
    try:
        with torch.no_grad(), contextlib.redirect_stdout(sys.stderr):  # its progress lines are not the table
            torch.onnx.export(model, args, str(tmp / "model.onnx"))
        for f in tmp.iterdir():
            if f.name != "model.onnx":
                f.replace(folder / f.name)
        (tmp / "model.onnx").replace(target)  # last: its presence means the export is whole
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
