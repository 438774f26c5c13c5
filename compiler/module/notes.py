"""What a compile reports, in typed fields: `CompileNotes` (`CompiledModule.notes`) and its `QuantNotes`.

Each quantization technique's own record keeps its type (range_scale.RangeScaling, channel_fill.ChannelFill,
weight_rounding.WeightRounding, exponent_search's SearchResult and KeepFloatResult, `RecipeSearch`), so a
reader writes `module.notes.calibration.recipe.chosen` and a type checker follows it.

In a `.vtamod` file the notes are the JSON object `to_dict` gives, with the field names as keys (the
manifest's "notes", as before these classes).  `from_dict` reads it back by the fields' type hints: a value
of the wrong type, a missing field or an unknown one is one CompileError naming it (module/check.py adds
the file's name).
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar, Union

from vtakit.compiler.options import CalibrationMethod, Choice, EqualizeMode, RequantMode, WeightRoundingMode
from vtakit.compiler.quant.exponent_search import KeepFloatResult, SearchResult
from vtakit.compiler.quant.techniques.channel_fill import ChannelFill
from vtakit.compiler.quant.techniques.range_scale import RangeScaling
from vtakit.compiler.quant.techniques.weight_rounding import WeightRounding
from vtakit.errors import CompileError

T = TypeVar("T")


@dataclass(frozen=True)
class RecipeSearch:
    """What the recipe search did (compiler/quant/recipe_search.py)."""
    chosen: dict[str, str]  # knob -> value, the recipe compiled
    start: dict[str, str]  # the recipe the search started from (FALLBACK, with the knobs given by hand)
    searched: tuple[str, ...]  # the knobs the search could move
    error_before: float  # mean relative squared output error of the starting recipe
    error_after: float
    cosine_before: float  # mean output cosine on the calibration samples
    cosine_after: float
    trials: tuple[tuple[str, float, float], ...]  # (recipe label, error, fraction of samples it lowered)
    evaluated: int  # recipes quantized and run (a recipe met again is not)
    failed: dict[str, str]  # recipe label -> the CompileError it met (such a recipe is never chosen)
    seconds: float
    output_errors: dict[str, float] = field(default_factory=dict)  # the chosen recipe's error, output by output


@dataclass(frozen=True)
class ModelFactors:
    """Range scaling of a QDQ model: its activation scales that are not powers of two, met exactly by
    rescaling (range_scale.plan_model_factors)."""
    model_factors: dict[str, float]  # tensor -> factor


@dataclass(frozen=True)
class QdqNotes:
    """A quantized model's own scales as compiled (qdq.compile_notes)."""
    activations: int  # activation tensors whose scale the model gave
    weights: tuple[str, ...]  # nodes whose weights kept the model's scales
    exact: bool  # every scale kept as the model has it
    notes: tuple[str, ...]  # what moved and why, one line each


@dataclass(frozen=True)
class QuantNotes:
    """What quantization chose and measured (`float_and_int8`, the recipe search)."""
    samples: int  # calibration samples
    synthetic: bool  # made-up samples (no `calibrate` given): accuracy on real data is unknown
    method: CalibrationMethod  # the calibration method used (the recipe's, where it was "auto")
    equalize: EqualizeMode
    bias_correction: bool
    requant: RequantMode  # "pow2" or "multiplier", as resolved for the configuration
    weight_rounding: WeightRoundingMode  # "gptq" only where GPTQ ran
    seconds: float
    range_scale: RangeScaling | ModelFactors | None = None  # None: not range-scaled
    channel_fill: ChannelFill | None = None
    gptq: WeightRounding | None = None
    search: SearchResult | None = None  # calibration "search"
    keep_float_auto: KeepFloatResult | None = None  # keep_float_until
    qdq: QdqNotes | None = None  # a QDQ model
    recipe: RecipeSearch | None = None  # the recipe search ran (auto knobs on real samples)


@dataclass(frozen=True)
class CompileNotes:
    """What `compile_module` reports besides the module itself."""
    source_nodes: int = 0  # ONNX nodes imported
    optimized_nodes: int = 0  # after the float graph passes
    compile_s: float = 0.0
    defaulted_dims: tuple[str, ...] = ()  # symbolic input dimensions set to 1
    calibration: QuantNotes | None = None  # target "vta"
    host_reasons: dict[str, str] = field(default_factory=dict)  # node -> why it runs on the host
    gpu: dict[str, Any] | None = None  # the GPU launches and their PTX (backends.cuda.record_launches)
    step_s: dict[str, float] = field(default_factory=dict)  # seconds per pipeline step, in the order they ran
    cached_from: str = ""  # the compile cache's entry this module came from ("": compiled now); never saved

    def step_line(self, shown: float = 0.05) -> str:
        """The compile's time per step, one line: the slowest first, steps under `shown` seconds counted."""
        steps = sorted(self.step_s.items(), key=lambda kv: -kv[1])
        big = [f"{name} {s:.2f} s" for name, s in steps if s >= shown]
        rest = len(steps) - len(big)
        if not big:
            return f"time per step: all {rest} under {shown:g} s"
        return "time per step: " + ", ".join(big + ([f"{rest} more under {shown:g} s"] if rest else []))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object a `.vtamod` manifest holds (field names as keys, enums as their spellings); where
        this process got the module from is no part of it."""
        d = _plain(self)
        d.pop("cached_from", None)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> CompileNotes:
        """The notes of a manifest; one CompileError naming what is wrong."""
        return _typed(cls, d, "")


def _plain(v: Any) -> Any:
    """`v` as JSON values: dataclasses as objects (their fields, None left out), enums as strings."""
    if is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name)) for f in fields(v) if getattr(v, f.name) is not None}
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _bad(where: str, v: Any, what: str) -> CompileError:
    return CompileError(f"{where or 'the notes'} must be {what}, got {str(v)[:40]!r}")


def _child(where: str, key: Any) -> str:
    return f"{where}.{str(key)[:40]}" if where else str(key)[:40]


def _typed(kind: Any, v: Any, where: str) -> Any:
    """The JSON value `v` as type `kind` (a type hint: scalars, enums, tuples, lists, dicts by string,
    unions, Any and dataclasses)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return v
    if origin in (Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _typed(option, v, where)
            except CompileError as e:
                errors.append(str(e))
        raise CompileError(errors[-1] if len(errors) == 1 else f"{where} is none of its kinds: {'; '.join(errors)}")
    if isinstance(kind, type) and issubclass(kind, Choice):
        return kind.parse(v)
    if kind is bool or kind is str:
        if not isinstance(v, kind):
            raise _bad(where, v, f"a {kind.__name__}")
        return v
    if kind is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _bad(where, v, "an integer")
        return v
    if kind is float:
        if isinstance(v, str) and v in ("nan", "inf", "-inf"):  # how the manifest writes them
            return float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _bad(where, v, "a number")
        return float(v)
    if origin in (tuple, list):
        if not isinstance(v, list):
            raise _bad(where, v, "a list")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(v) != len(args):
                raise _bad(where, v, f"a list of {len(args)}")
            return tuple(_typed(a, x, where) for a, x in zip(args, v))
        items = [_typed(args[0], x, where) for x in v]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(v, dict):
            raise _bad(where, v, "an object")
        return {k: _typed(args[1], x, _child(where, k)) for k, x in v.items()}
    if is_dataclass(kind):
        return _record(kind, v, where)
    raise CompileError(f"{where}: no reader for {kind!r}")  # pragma: no cover - a field type added here unread


def _record(kind: type[T], v: Any, where: str) -> T:
    if not isinstance(v, dict):
        raise _bad(where, v, "an object")
    hints = typing.get_type_hints(kind)
    known = {f.name: f for f in fields(kind)}  # type: ignore[arg-type]
    unknown = [k for k in v if k not in known]
    if unknown:
        raise CompileError(f"unknown field {_child(where, unknown[0])!r}")
    missing = [n for n, f in known.items() if n not in v and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise CompileError(f"missing field {_child(where, missing[0])!r}")
    return kind(**{k: _typed(hints[k], x, _child(where, k)) for k, x in v.items()})
