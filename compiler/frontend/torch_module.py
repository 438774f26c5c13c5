"""A PyTorch model as the compiler's input: `vtakit.compile(module, example_inputs=...)`.

The module is exported exactly as a user would export it, by torch's own default `torch.onnx.export`
(torch 2.13: the dynamo exporter, weights in `model.onnx.data` beside `model.onnx`), into a temporary
folder the import reads and then drops; so a module compiles as its exported file would, bit for bit.
torch is an optional extra (`pip install vtakit[torch]`), never a requirement: a module can only exist
where torch is installed, and nothing here imports torch for any other model.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.errors import CompileError, one_line

EXPORTED_NAME = "model.onnx"


def is_torch_module(model: Any) -> bool:
    """Whether `model` is a torch.nn.Module, judged by its class's ancestry, without importing torch."""
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn") for c in type(model).__mro__)


def _as_tensors(example_inputs: Any, torch) -> tuple:
    """The forward's positional arguments: one array or tensor, or a tuple/list of them."""
    items = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    out = []
    for i, x in enumerate(items):
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (np.ndarray, np.generic, int, float)):
            out.append(torch.from_numpy(np.asarray(x)))
        else:
            raise CompileError(f"example input {i} must be an array or a torch.Tensor, not {type(x).__name__}")
    return tuple(out)


@contextmanager
def exported(module: Any, example_inputs: Any) -> Iterator[Path]:
    """The path of `module` exported by torch's default exporter in evaluation mode (its forward called
    with `example_inputs`), valid inside the `with`; the folder is removed after it."""
    import torch  # lazy: torch (optional; present wherever a torch module exists)

    if example_inputs is None:
        raise CompileError("a torch.nn.Module needs example_inputs (the forward's arguments) to be exported")
    args = _as_tensors(example_inputs, torch)
    was_training = module.training
    module.eval()
    with tempfile.TemporaryDirectory(prefix="vtakit-torch-") as folder:
        path = Path(folder) / EXPORTED_NAME
        try:
            torch.onnx.export(module, args, str(path))
        except Exception as e:  # noqa: BLE001 - the exporter raises many kinds; one line names it
            raise CompileError(f"torch.onnx.export failed on {type(module).__name__}: "
                               f"{one_line(f'{type(e).__name__}: {e}', 300)}") from None
        finally:
            module.train(was_training)
        yield path
