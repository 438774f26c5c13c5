"""Host execution of the quantizer's requantizing epilogues (QConv, QDense, QAdd): per-channel shifts
and fixed-point multipliers after an int32 kernel, and the wide residual pair, on either host backend.

They live beside the op families that run them so the registry needs nothing from the quantizer; the
quantizer's techniques (`quant/techniques/channel_scales.py`, `fixed_point.py`, `wide_residual.py`)
decide the attributes these functions read.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.backends import cpu
from vtakit.compiler.ir import Node


def requantize_channels(acc: np.ndarray, shifts: int | tuple[int, ...], clip: tuple[int, int],
                        multiplier: tuple[int, ...] | None = None, pre_shift: int = 0) -> np.ndarray:
    """The host's per-channel epilogue on an int32 NC.. accumulator: arithmetic shift right of
    channel c by shifts[c], clip, int8 (the accelerator's SHR-by-vector, MIN, MAX).  With a
    `multiplier` (fixed_point.py) first >> pre_shift and times multiplier[c], wrapping at 32 bits
    like the ALU's MUL."""
    per = (1, -1) + (1,) * (acc.ndim - 2)
    x = np.asarray(acc, np.int32).astype(np.int64)
    if multiplier is not None:
        x = ((x >> pre_shift) * np.asarray(multiplier, np.int64).reshape(per)).astype(np.int32).astype(np.int64)
    s = np.asarray(shifts, np.int64).reshape(per) if isinstance(shifts, tuple) else int(shifts or 0)
    lo, hi = clip
    return np.clip(x >> s, lo, hi).astype(np.int8)


def on_host(kernels, fn, args: list, shape: tuple[int, ...], dtype) -> object:
    """fn on numpy arrays for either host backend: GPU arrays are read back and the result returned to the
    GPU (`kernels.host` / `kernels.device`); at GPU compile time (no data, nothing launched) a placeholder."""
    if kernels is not cpu and hasattr(kernels, "host"):
        if getattr(kernels.backend, "records_only", False):  # cuda.record.Recorder: compile time, no data
            return kernels.backend.empty(shape, dtype)
        return kernels.device(np.ascontiguousarray(fn(*[kernels.host(a) for a in args])))
    return fn(*args)


def run_requantized(acc, attrs: dict, kernels):
    """`requantize_channels` with a QConv/QDense's attributes for either host backend (`on_host`)."""
    args = (attrs["shift"], tuple(attrs["clip"]), attrs.get("multiplier"), attrs.get("pre_shift", 0))
    return on_host(kernels, lambda a: requantize_channels(a, *args), [acc], tuple(acc.shape), np.int8)


def host_epilogue(attrs: dict) -> bool:
    """Whether a QConv/QDense runs its requantization after the int32 kernel on the host (per-channel
    shifts or multipliers) rather than inside it (one immediate shift)."""
    return isinstance(attrs.get("shift"), tuple) or "multiplier" in attrs


def requantize_wide(acc: np.ndarray, attrs: dict) -> np.ndarray:
    """The wide conv's epilogue on the host: the accelerator's (acc + bias') [>> p, * M] >> shift, int32."""
    per = (1, -1) + (1,) * (acc.ndim - 2)
    x = np.asarray(acc, np.int32).astype(np.int64)
    if "multiplier" in attrs:
        x = ((x >> attrs["pre_shift"]) * np.asarray(attrs["multiplier"], np.int64).reshape(per)).astype(np.int32)
        x = x.astype(np.int64)
    shift = attrs["shift"]
    s = np.asarray(shift, np.int64).reshape(per) if isinstance(shift, tuple) else int(shift)
    return (x >> s).astype(np.int32)


def add_wide(a: np.ndarray, b: np.ndarray, left: tuple[int, int], shift: int, clip: tuple[int, int]) -> np.ndarray:
    """clip(((a << left[0]) + (b << left[1])) >> shift) as int8: the wide QAdd (a or b int32)."""
    x = (np.asarray(a).astype(np.int64) << left[0]) + (np.asarray(b).astype(np.int64) << left[1])
    return np.clip(x >> shift, clip[0], clip[1]).astype(np.int8)


def run_wide_conv(node: Node, acc, kernels, residual=None) -> object:
    """A wide QConv on the host after its int32 kernel: the wide result, or with a fused residual add
    (passes.fusion) the add's int8 sum."""
    a = node.attrs
    if residual is None:
        return on_host(kernels, lambda x: requantize_wide(x, a), [acc], tuple(acc.shape), np.int32)
    shift, clip = a["residual"]
    left = (0, int(a.get("residual_bits", 0)))
    return on_host(kernels, lambda x, r: add_wide(requantize_wide(x, a), r, left, shift, tuple(clip)),
                   [acc, residual], tuple(acc.shape), np.int8)


def run_wide_add(node: Node, args: list, kernels) -> object:
    """An unfused wide QAdd on the host."""
    a = node.attrs
    left, shift, clip = tuple(a["left"]), int(a.get("shift") or 0), tuple(a.get("clip", (-128, 127)))
    return on_host(kernels, lambda x, y: add_wide(x, y, left, shift, clip), list(args[:2]),
                   tuple(args[0].shape), np.int8)
