"""The quantization techniques' registry: what each technique is, when it runs, and the option that
switches it, as data that quantization walks.

A technique module ends with one `register(Technique(...))`; its name in the import line of
`techniques/catalog.py` is the one registration line.  From then on:

- its option (an `options.Option`) is a QuantOptions keyword, a keyword of `compile_module` and
  `vtakit.compile`, and a command-line flag of `vtakit compile` and `vtakit report --accuracy`;
- quantization calls its `apply` at its stage, in `order` within the stage:

  MARK     per recipe, on a copy of the float graph (`recipe_search.py`): `apply(graph, cfg, value)`
           writes the graph note `note` that the int8 rewrite reads (the weights never do, so the
           recipe search shares their work across values of this option).
  FLOAT    first in `int8.weights_for_int8`: `apply(graph, samples, value) -> graph`, the float model
           itself changed (cross-layer equalization), before any bias correction.
  WEIGHTS  then: `apply(state, value) -> state` on a `WeightState` (range scaling, channel fill, GPTQ
           rounding): new weights through `state.with_weights`, which corrects the biases again, what
           the technique did through `state.record`.

The int8 rewrite itself (`quant/quantize.py`: per-channel weight exponents, fixed-point requantization,
the wide residual pair) reads its options directly; a technique that changes the rewrite is more than
one module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any, Callable, Mapping

import numpy as np

from vtakit.compiler.ir import Graph
from vtakit.compiler.options import BUILT_IN, QUANT_OPTIONS, Option, QuantOptions, register_option, unregister_option
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig


class Stage(IntEnum):
    """When a technique runs (module docstring), in this order."""
    MARK = 1
    FLOAT = 2
    WEIGHTS = 3


@dataclass(frozen=True)
class Technique:
    """One quantization technique: its hook and the option that switches it (None: it always runs and its
    `apply` decides, as channel fill does after range scaling)."""

    name: str
    stage: Stage
    apply: Callable[..., Any]  # the stage's signature (module docstring); `value` is the option's value
    option: Option | None = None
    order: int = 0  # within the stage, lower first
    note: str = ""  # MARK: the graph note `apply` writes
    doc: str = ""  # one line: what it does

    def value(self, options: QuantOptions) -> Any:
        """The option's value in `options` (None without an option)."""
        return getattr(options, self.option.name) if self.option is not None else None


TECHNIQUES: dict[str, Technique] = {}
"""Every registered technique by name, in registration order."""


def register(technique: Technique) -> Technique:
    """Add `technique` (its option too, `options.register_option`); a name taken by another is an error."""
    known = TECHNIQUES.get(technique.name)
    if known is not None and known != technique:
        raise CompileError(f"quantization technique {technique.name!r} is registered already")
    if not isinstance(technique.stage, Stage):
        raise CompileError(f"technique {technique.name!r}: stage must be a Stage, got {technique.stage!r}")
    if technique.stage is Stage.MARK and not technique.note:
        raise CompileError(f"technique {technique.name!r}: a MARK technique names the graph note it writes")
    if technique.option is not None:
        register_option(technique.option)
    TECHNIQUES[technique.name] = technique
    return technique


def unregister(name: str) -> None:
    """Take a technique back, and its option unless that is built in (tests register toy techniques)."""
    technique = TECHNIQUES.pop(name, None)
    if technique is not None and technique.option is not None and technique.option.name not in BUILT_IN:
        unregister_option(technique.option.name)


def in_stage(stage: Stage) -> list[Technique]:
    """The techniques of `stage` in the order they run (`order`, then registration)."""
    return sorted((t for t in TECHNIQUES.values() if t.stage is stage), key=lambda t: t.order)


def mark_graph(g: Graph, cfg: HwConfig, options: QuantOptions) -> None:
    """The MARK techniques on `g` (a copy the caller owns), each with its option's value in `options`."""
    for t in in_stage(Stage.MARK):
        t.apply(g, cfg, t.value(options))


def mark_notes() -> tuple[str, ...]:
    """The graph notes the MARK techniques write (carried onto graphs made before they were marked)."""
    return tuple(t.note for t in in_stage(Stage.MARK))


def float_stage(g: Graph, samples: list[dict[str, np.ndarray]], options: QuantOptions) -> Graph:
    """The FLOAT techniques on `g`, in order."""
    for t in in_stage(Stage.FLOAT):
        g = t.apply(g, samples, t.value(options))
    return g


def weights_key(options: QuantOptions) -> tuple[tuple[str, Any], ...]:
    """What `int8.weights_for_int8`'s result depends on among the options (`Option.weight_side`): the key
    of the recipe search's weights cache."""
    return tuple((name, getattr(options, name)) for name, o in QUANT_OPTIONS.items() if o.weight_side)


@dataclass(frozen=True)
class WeightState:
    """What the WEIGHTS techniques hand on (`int8.weights_for_int8` makes the first, each returns a new one)."""

    samples: list[dict[str, np.ndarray]]  # the calibration samples, as feeds
    options: QuantOptions  # one recipe: nothing "auto" but what the techniques resolve themselves
    uncorrected: Graph  # the float graph, biases as the model has them
    graph: Graph  # the same with each bias corrected for its int8 weights (what calibration sees)
    correct: Callable[[WeightState, Graph], Graph]  # the bias correction for this state (int8.py)
    weight_exponents: Callable[..., Any]  # the quantizer's own (quantize.weight_exponents), handed in
    qdq: Any = None  # qdq.QdqScales: a QDQ model's own scales (empty: none)
    shifts: Mapping[str, np.ndarray] = field(default_factory=dict)  # node -> measured mean output shift
    records: Mapping[str, Any] = field(default_factory=dict)  # technique -> what it did (the notes read it)
    seeds: Mapping[tuple[str, str], Any] = field(default_factory=dict)  # entries of the rewrite's weight cache

    def corrected(self, uncorrected: Graph) -> Graph:
        """`uncorrected` with its biases corrected as this state corrects (its scales, its measured shifts)."""
        return self.correct(self, uncorrected)

    def with_weights(self, uncorrected: Graph, **changes: Any) -> WeightState:
        """This state with `changes` and new weights, the biases corrected for them again."""
        state = replace(self, **changes) if changes else self
        return replace(state, uncorrected=uncorrected, graph=state.corrected(uncorrected))

    def record(self, technique: str, what: Any) -> WeightState:
        """This state remembering what `technique` did (int8.float_and_int8 puts it in the notes)."""
        return replace(self, records={**self.records, technique: what})


def weights_stage(state: WeightState) -> WeightState:
    """The WEIGHTS techniques on `state`, in order."""
    for t in in_stage(Stage.WEIGHTS):
        state = t.apply(state, t.value(state.options))
    return state
