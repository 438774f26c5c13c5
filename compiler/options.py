"""The compiler's options as data: one definition of each option, its type and the values it takes.

`CompileOptions` (what `compile_module` builds) holds a `QuantOptions` (how the int8 graph is made);
every choice is a string enum, so JSON, the command line (`vtakit compile --calibration mse`) and the
Python API (`calibration="mse"` or `CalibrationMethod.MSE`) spell values alike.  Strings are parsed in
one place, `Choice.parse`: a value an option does not take is one CompileError naming the option and
its values.  "auto" is a value only of the knobs the recipe search sets (compiler/quant/recipe_search.py) and
of `requant`, which the configuration decides (fixed_point.check_requant).

This module imports nothing of the compiler, so the techniques, the recipe search, the pipeline and the
command line can all read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from numbers import Integral
from typing import Any, Mapping, TypeVar

from vtakit.errors import CompileError

C = TypeVar("C", bound="Choice")


class Choice(str, Enum):
    """A compile option's value.  `__option__`: the option's name in messages and on the command line."""

    __option__ = ""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls: type[C], value: Any, *, concrete: bool = False) -> C:
        """`value` (a member or its spelling) as a member; one CompileError naming the option and its values.
        `concrete`: "auto" is refused (a function that runs one recipe, not the search)."""
        allowed = cls.values(concrete=concrete)
        if isinstance(value, str) and value in allowed:
            return cls(value)
        shown = str(value)[:40] if isinstance(value, str) else type(value).__name__
        what = f"{cls.__option__} {shown!r} is not a choice here" if value == AUTO else \
            f"unknown {cls.__option__} {shown!r}"
        raise CompileError(f"{what}; use one of {', '.join(allowed)}")

    @classmethod
    def values(cls, *, concrete: bool = False) -> tuple[str, ...]:
        """The spellings, in order ("auto" first where the option has it; left out when `concrete`)."""
        return tuple(m.value for m in cls if not (concrete and m.value == AUTO))


AUTO = "auto"
"""The value of a knob the recipe search sets (recipe_search.py), or that the configuration decides (requant)."""


class Target(Choice):
    """What the whole graph is compiled for: int8 on the accelerator, or the float graph on the CPU or GPU."""
    __option__ = "target"
    VTA = "vta"
    CPU = "cpu"
    CUDA = "cuda"


class Host(Choice):
    """Where a "vta" module's host tasks run."""
    __option__ = "host"
    CPU = "cpu"
    CUDA = "cuda"


HOSTS = tuple(h.value for h in Host)
"""The host backends by name: a module's `host`, and the targets that run every node on the host."""
TARGETS = tuple(t.value for t in Target)


class CalibrationMethod(Choice):
    """How activation exponents are chosen (compiler/quant/calibration.py); "search": max, then moved by the
    error at the outputs (exponent_search.py)."""
    __option__ = "calibration"
    AUTO = "auto"
    MAX = "max"
    PERCENTILE = "percentile"
    MSE = "mse"
    KL = "kl"
    SEARCH = "search"


class EqualizeMode(Choice):
    """Cross-layer equalization (techniques/equalize.py): "exact" only through identity and ReLU,
    "clip-as-relu" also through ReLU6, which becomes ReLU (changes the float model)."""
    __option__ = "equalize"
    OFF = "off"
    EXACT = "exact"
    CLIP_AS_RELU = "clip-as-relu"


class RequantMode(Choice):
    """How conv/dense requantize (techniques/fixed_point.py): power-of-two shifts or fixed-point multipliers
    (configurations with ALU MUL); "auto": multipliers where the configuration has MUL."""
    __option__ = "requant"
    AUTO = "auto"
    POW2 = "pow2"
    MULTIPLIER = "multiplier"


class RangeScaleMode(Choice):
    """Activation groups rescaled to fill the int8 range (techniques/range_scale.py)."""
    __option__ = "range_scale"
    ON = "on"
    OFF = "off"


class WideResidualMode(Choice):
    """A conv feeding a residual add keeps extra bits into the add (techniques/wide_residual.py)."""
    __option__ = "wide_residual"
    AUTO = "auto"
    ON = "on"
    OFF = "off"


class WeightRoundingMode(Choice):
    """int8 weights rounded for each layer's output (gptq, techniques/weight_rounding.py) or to nearest."""
    __option__ = "weight_rounding"
    AUTO = "auto"
    GPTQ = "gptq"
    NEAREST = "nearest"


CHOICES: dict[str, type[Choice]] = {c.__option__: c for c in (
    Target, Host, CalibrationMethod, EqualizeMode, RequantMode, RangeScaleMode, WideResidualMode, WeightRoundingMode)}
"""Option name -> its enum: the command line takes its choices from here."""


def _parsed(obj: Any, name: str, kind: type[Choice]) -> None:
    """Replace a frozen dataclass's field `name` by its parsed member."""
    object.__setattr__(obj, name, kind.parse(getattr(obj, name)))


def _check_bool(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise CompileError(f"{name} must be true or false, got {str(value)[:40]!r}")


@dataclass(frozen=True)
class QuantOptions:
    """How the int8 graph is made (target "vta").  The defaults are compile_module's: the three recipe knobs
    "auto", chosen by the network's outputs on the calibration samples (recipe_search.py)."""

    calibration: CalibrationMethod = CalibrationMethod.AUTO
    equalize: EqualizeMode = EqualizeMode.OFF  # no net win on the real networks (benchmarks/real_accuracy.py)
    bias_correction: bool = True  # wins on EfficientNet-Lite0 (benchmarks/real_accuracy.py --no-bias-correction)
    requant: RequantMode = RequantMode.AUTO
    range_scale: RangeScaleMode = RangeScaleMode.ON
    wide_residual: WideResidualMode = WideResidualMode.AUTO
    weight_rounding: WeightRoundingMode = WeightRoundingMode.AUTO
    keep_float: tuple[str, ...] = ()  # nodes that stay float on the host
    keep_float_until: float | None = None  # a mean output cosine reached by keeping the worst layers float
    seed: int = 0  # of the made-up calibration samples (no `calibrate` given)
    host_int8: bool = False  # int8 also for nodes the accelerator would not take (default: they stay float)

    def __post_init__(self) -> None:
        for f in fields(self):
            kind = CHOICES.get(f.name)
            if kind is not None:
                _parsed(self, f.name, kind)
        _check_bool(self.bias_correction, "bias_correction")
        _check_bool(self.host_int8, "host_int8")
        if (isinstance(self.keep_float, str) or not isinstance(self.keep_float, (tuple, list, set, frozenset))
                or not all(isinstance(n, str) for n in self.keep_float)):
            raise CompileError(f"keep_float takes node names, got {str(self.keep_float)[:60]!r}")
        object.__setattr__(self, "keep_float", tuple(self.keep_float))
        if isinstance(self.seed, bool) or not isinstance(self.seed, Integral):
            raise CompileError(f"seed must be an integer, got {str(self.seed)[:40]!r}")

    def auto_knobs(self) -> tuple[str, ...]:
        """The recipe knobs left "auto", for the search to set."""
        return tuple(k for k in RECIPE_KNOBS if getattr(self, k) == AUTO)

    @classmethod
    def of(cls, options: QuantOptions | None = None, **keywords: Any) -> QuantOptions:
        """`options` (default: the defaults) with `keywords` set, each a field by name."""
        base = options if options is not None else cls()
        if not isinstance(base, QuantOptions):
            raise CompileError(f"options must be a QuantOptions, got {type(base).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(k for k in keywords if k not in names)
        if unknown:
            raise CompileError(f"unknown quantization option {unknown[0]!r}; use one of {', '.join(sorted(names))}")
        return replace(base, **keywords) if keywords else base


RECIPE_KNOBS = ("calibration", "wide_residual", "weight_rounding")
"""The knobs whose "auto" the recipe search sets (recipe_search.py)."""


@dataclass(frozen=True)
class CompileOptions:
    """Everything `compile_module` is told besides the model, its configuration and its calibration samples."""

    target: Target = Target.VTA
    host: Host = Host.CPU
    quant: QuantOptions = field(default_factory=QuantOptions)
    input_shapes: Mapping[str, tuple[int, ...]] | None = None  # for symbolic input dimensions
    bind: Mapping[str, Any] | None = None  # inputs fixed to values at compile time: constants (frontend/bound.py)
    partition: Any = None  # passes.partition.PartitionOptions or a dict of its fields (not imported here: its
    # imports reach the techniques, which import this module)
    schedules: Mapping[str, Any] | None = None  # node -> the schedule its accelerator task uses

    def __post_init__(self) -> None:
        _parsed(self, "target", Target)
        _parsed(self, "host", Host)
        if not isinstance(self.quant, QuantOptions):
            raise CompileError(f"quant must be a QuantOptions, got {type(self.quant).__name__}")
        if self.target == Target.CPU and self.host == Host.CUDA:
            raise CompileError("target cpu runs every node on the CPU; use target cuda for the GPU")

    @classmethod
    def of(cls, options: CompileOptions | None = None, **keywords: Any) -> CompileOptions:
        """`options` (default: the defaults) with `keywords` set: any field of CompileOptions or of
        QuantOptions by name (compile_module's keywords; `partition_options` is `partition`)."""
        base = options if options is not None else cls()
        if not isinstance(base, CompileOptions):
            raise CompileError(f"options must be a CompileOptions, got {type(base).__name__}")
        if "partition_options" in keywords:
            keywords["partition"] = keywords.pop("partition_options")
        own = {f.name for f in fields(cls)}
        quant_names = {f.name for f in fields(QuantOptions)}
        unknown = sorted(k for k in keywords if k not in own and k not in quant_names)
        if unknown:
            raise CompileError(f"unknown compile option {unknown[0]!r}; use one of "
                               f"{', '.join(sorted((own - {'quant'}) | quant_names))}")
        quant = {k: v for k, v in keywords.items() if k in quant_names}
        mine = {k: v for k, v in keywords.items() if k in own}
        if quant:
            mine["quant"] = replace(mine.get("quant", base.quant), **quant)
        return replace(base, **mine) if mine else base
