"""Data-dependent initialisation of the seeded corpus networks (LSUV: layer-sequential unit variance, Mishkin
and Matas 2016), done in torch before export so that a seeded network's activations look like a trained one's.

He-normal weights alone leave some architectures degenerate: in MobileViT-XXS the float activations shrink
to ~1e-10 deep in the network, an output no int8 grid (or user) would ever meet.  LSUV visits each
convolution and linear layer in forward order, runs the network on the entry's own calibration inputs and
rescales that layer's weight so its output has unit standard deviation.  It looks only at the float network's
own activations, never at what vtakit does with it; it is seeded (the He-normal draw before it) and
deterministic (the same inputs, the same visits).  Biases stay zero and norms' affine parameters at 1 and 0
(transformers' own initialisation).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tests.support.corpus.entry import Feeds

TOLERANCE = 0.02
"""How close to 1 each layer's output standard deviation is brought."""
MAX_VISITS = 4
"""Rescalings of one layer at most (one is exact for a layer called once with a zero bias)."""
TINY = 1e-30
"""An output standard deviation at or under this is dead (all zero): nothing to rescale."""


class _Seen(Exception):
    """Raised by the hook once the visited layer's output is captured: the rest of the forward pass is not needed."""


def _layers(net) -> list:
    """Convolutions and linear layers, transformers' GPT-2 `Conv1D` (a linear layer with its weight transposed)
    included, except a layer whose weight is tied to another module's (GPT-2's head shares the embedding)."""
    import torch  # pyright: ignore[reportMissingImports]  # lazy: torch

    kinds = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d, torch.nn.Linear)
    layers = [m for m in net.modules() if isinstance(m, kinds) or type(m).__name__ == "Conv1D"]
    owners: dict[int, int] = {}
    for m in net.modules():
        for p in m.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    return [m for m in layers if owners.get(id(_scaled_parameter(m)), 0) <= 1]


def _scaled_parameter(layer):
    """The parameter whose scaling scales the layer's weight: the weight itself, or the magnitude g of a
    weight-normalised one (wav2vec2's positional convolution: weight = g * v / |v|)."""
    from torch.nn.utils import parametrize  # pyright: ignore[reportMissingImports]  # lazy: torch

    if parametrize.is_parametrized(layer, "weight"):
        return layer.parametrizations.weight.original0
    return layer.weight


def _batches(feeds: Sequence[Feeds]) -> list[tuple]:
    """The calibration feeds as torch argument tuples, stacked into one batch where their shapes agree."""
    import torch  # pyright: ignore[reportMissingImports]  # lazy: torch

    columns = [[np.asarray(v) for v in f.values()] for f in feeds]
    if all(len(c) == len(columns[0]) and all(a.shape == b.shape for a, b in zip(c, columns[0])) for c in columns):
        return [tuple(torch.from_numpy(np.concatenate(col, 0)) for col in zip(*columns))]
    return [tuple(torch.from_numpy(a) for a in c) for c in columns]


def _output_std(net, layer, batches: list[tuple]) -> float | None:
    """The standard deviation of `layer`'s output over every calibration input (its first call in each
    forward pass), or None when the forward pass never reaches it."""
    import torch  # pyright: ignore[reportMissingImports]  # lazy: torch

    outs: list = []

    def hook(_m, _i, out):
        outs.append(out.detach().double().flatten())
        raise _Seen

    handle = layer.register_forward_hook(hook)
    try:
        for args in batches:
            try:
                net(*args)
            except _Seen:
                pass
    finally:
        handle.remove()
    return float(torch.cat(outs).std()) if outs else None


def lsuv(net, feeds: Sequence[Feeds]) -> Any:
    """Rescale every convolution and linear layer of `net` (in eval mode), in forward order, so that its output
    on `feeds` (the entry's calibration inputs, in the order of the module's forward arguments) has unit
    standard deviation; returns `net`."""
    import torch  # pyright: ignore[reportMissingImports]  # lazy: torch

    batches = _batches(feeds)
    order: list = []
    handles = [m.register_forward_hook(lambda m, _i, _o: order.append(m) if m not in order else None)
               for m in _layers(net)]
    with torch.no_grad():
        try:
            for args in batches[:1]:
                net(*args)
        finally:
            for h in handles:
                h.remove()
        for layer in order:
            for _ in range(MAX_VISITS):
                std = _output_std(net, layer, batches)
                if std is None or std <= TINY or abs(std - 1.0) <= TOLERANCE:
                    break
                _scaled_parameter(layer).mul_(1.0 / std)
    return net


def activation_stds(net, feeds: Sequence[Feeds]) -> list[tuple[str, float]]:
    """(name, output standard deviation on `feeds`) of every leaf module the forward pass calls, in call order
    (the float check that no layer's activations vanish or explode)."""
    import torch  # pyright: ignore[reportMissingImports]  # lazy: torch

    names = {m: n for n, m in net.named_modules()}
    seen: list[tuple[str, float]] = []

    def hook(m, _i, out):
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel() > 1:
            seen.append((names[m], float(out.detach().double().std())))

    leaves = [m for m in net.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.no_grad():
            for args in _batches(feeds):
                net(*args)
    finally:
        for h in handles:
            h.remove()
    return seen
