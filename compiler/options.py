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


CHOICES: dict[str, type[Choice]] = {c.__option__: c for c in (Target, Host)}
"""Option name -> its enum: the command line takes its choices from here (the quantization options join it
as they are declared, `register_option`)."""


def _parsed(obj: Any, name: str, kind: type[Choice]) -> None:
    """Replace a frozen dataclass's field `name` by its parsed member."""
    object.__setattr__(obj, name, kind.parse(getattr(obj, name)))


def _check_bool(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise CompileError(f"{name} must be true or false, got {str(value)[:40]!r}")


@dataclass(frozen=True)
class Option:
    """One quantization option as data.  QuantOptions checks its values and takes it as a keyword (so do
    `compile_module` and `vtakit.compile`), the command line makes its flag from it (`--name-with-dashes`,
    the choices, the help), and the weights cache of the recipe search keys on it (`weight_side`).  The
    built-in options are declared below; a technique module may register one of its own
    (techniques/registry.py)."""

    name: str
    kind: type  # a Choice enum, or bool (a --flag / --no-flag switch)
    default: Any
    help: str
    weight_side: bool = True  # whether `int8.weights_for_int8` reads it (False: calibration and marks only)

    def __post_init__(self) -> None:
        if not (self.kind is bool or (isinstance(self.kind, type) and issubclass(self.kind, Choice))):
            raise CompileError(f"option {self.name!r}: kind must be bool or a Choice enum, got {self.kind!r}")
        object.__setattr__(self, "default", self.parse(self.default))

    def parse(self, value: Any) -> Any:
        """`value` as this option's type: a Choice member or a bool; one CompileError otherwise."""
        if self.kind is bool:
            _check_bool(value, self.name)
            return value
        return self.kind.parse(value)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


QUANT_OPTIONS: dict[str, Option] = {}
"""Every quantization option by name, in the command line's order: the built-in ones below, then those
techniques registered (`register_option`)."""


def register_option(option: Option) -> None:
    """Make `option` a QuantOptions keyword and a command-line flag (a technique's own option,
    techniques/registry.register).  Registering the same option again changes nothing."""
    if QUANT_OPTIONS.get(option.name) is option:
        return
    taken = {f.name for f in fields(QuantOptions)} | {f.name for f in fields(CompileOptions)} | {"partition_options"}
    if not option.name.isidentifier() or option.name in QUANT_OPTIONS or option.name in taken:
        raise CompileError(f"quantization option {option.name!r} is taken or not a name")
    QUANT_OPTIONS[option.name] = option
    if option.kind is not bool:
        CHOICES[option.name] = option.kind


def unregister_option(name: str) -> None:
    """Forget an option a technique registered (tests register toy techniques and take them back)."""
    if name in BUILT_IN:
        raise CompileError(f"quantization option {name!r} is built in")
    QUANT_OPTIONS.pop(name, None)
    CHOICES.pop(name, None)


def _declare(option: Option) -> Any:
    """A built-in option (`QUANT_OPTIONS`); its default, for the QuantOptions field of the same name."""
    QUANT_OPTIONS[option.name] = option
    if option.kind is not bool:
        CHOICES[option.name] = option.kind
    return option.default


@dataclass(frozen=True, init=False)
class QuantOptions:
    """How the int8 graph is made (target "vta").  The defaults are compile_module's: the three recipe knobs
    "auto", chosen by the network's outputs on the calibration samples (recipe_search.py).

    Keyword-only.  Besides these fields it takes every option a technique registered (`QUANT_OPTIONS`): read
    it as an attribute (`options.weight_clip`, its default unless set); `extra` holds the ones set."""

    calibration: CalibrationMethod = _declare(Option(
        "calibration", CalibrationMethod, CalibrationMethod.AUTO, weight_side=False,
        help="how activation exponents are chosen: max, percentile, mse, kl or search (max, then moved by the "
             "error at the outputs; compiler.quant.calibration), or auto (default): max, percentile or mse, "
             "whichever the network's outputs on the calibration samples favour (compiler.quant.recipe)"))
    equalize: EqualizeMode = _declare(Option(  # off: no net win on the real networks (benchmarks/real_accuracy.py)
        "equalize", EqualizeMode, EqualizeMode.OFF,
        help="cross-layer equalization: off, exact (through ReLU only) or clip-as-relu (ReLU6 becomes ReLU "
             "where equalized: changes the float model); default off"))
    bias_correction: bool = _declare(Option(  # wins on EfficientNet-Lite0 (benchmarks/real_accuracy.py)
        "bias_correction", bool, True,
        help="correct each bias for the mean shift its weight quantization causes (default on)"))
    range_scale: RangeScaleMode = _declare(Option(
        "range_scale", RangeScaleMode, RangeScaleMode.ON,
        help="rescale activation groups (weights compensate) so each fills the int8 range at its power-of-two "
             "exponent: in effect float activation scales (default on)"))
    wide_residual: WideResidualMode = _declare(Option(
        "wide_residual", WideResidualMode, WideResidualMode.AUTO, weight_side=False,
        help="a conv whose only reader is a residual add keeps up to 6 extra bits into the add instead of "
             "requantizing to int8 first (configs without LOAD.ACC8); default auto: on where the network's "
             "outputs on the calibration samples favour it"))
    weight_rounding: WeightRoundingMode = _declare(Option(
        "weight_rounding", WeightRoundingMode, WeightRoundingMode.AUTO,
        help="int8 weights rounded for each layer's output on the calibration samples (gptq) or each to "
             "nearest; the weight exponents and programs are the same. Default auto: gptq where the network's "
             "outputs on the calibration samples favour it (it wins on EfficientNet-Lite0 and loses on "
             "RapidOCR's recognizer)"))
    requant: RequantMode = _declare(Option(
        "requant", RequantMode, RequantMode.AUTO,
        help="conv/dense requantization: power-of-two shifts, or per-channel fixed-point multipliers (configs "
             "with ALU MUL); default auto: multipliers where the config has MUL"))
    keep_float: tuple[str, ...] = ()  # nodes that stay float on the host
    keep_float_until: float | None = None  # a mean output cosine reached by keeping the worst layers float
    seed: int = 0  # of the made-up calibration samples (no `calibrate` given)
    host_int8: bool = False  # int8 also for nodes the accelerator would not take (default: they stay float)
    extra: tuple[tuple[str, Any], ...] = ()  # registered options set to other than their default, by name

    def __init__(self, **values: Any) -> None:
        own = {f.name: f for f in fields(self)}
        extra = values.pop("extra", ())
        try:
            extra = dict(extra)
        except (TypeError, ValueError):
            raise CompileError(f"extra takes (option, value) pairs, got {str(extra)[:60]!r}") from None
        for name in [k for k in values if k not in own]:
            if name not in QUANT_OPTIONS:
                raise CompileError(f"unknown quantization option {name!r}; use one of {', '.join(option_names())}")
            extra[name] = values.pop(name)
        for name, f in own.items():
            object.__setattr__(self, name, values.get(name, f.default))
        object.__setattr__(self, "extra", extra)
        self.__post_init__()

    def __post_init__(self) -> None:
        own = {f.name for f in fields(self)}
        for name, option in QUANT_OPTIONS.items():
            if name in own:
                object.__setattr__(self, name, option.parse(getattr(self, name)))
        extra = {}
        for name, value in dict(self.extra).items():
            option = QUANT_OPTIONS.get(name)
            if option is None or name in own:
                raise CompileError(f"unknown quantization option {name!r}; use one of {', '.join(option_names())}")
            value = option.parse(value)
            if value != option.default:
                extra[name] = value
        object.__setattr__(self, "extra", tuple(sorted(extra.items())))
        _check_bool(self.host_int8, "host_int8")
        if (isinstance(self.keep_float, str) or not isinstance(self.keep_float, (tuple, list, set, frozenset))
                or not all(isinstance(n, str) for n in self.keep_float)):
            raise CompileError(f"keep_float takes node names, got {str(self.keep_float)[:60]!r}")
        object.__setattr__(self, "keep_float", tuple(self.keep_float))
        if isinstance(self.seed, bool) or not isinstance(self.seed, Integral):
            raise CompileError(f"seed must be an integer, got {str(self.seed)[:40]!r}")

    def __getattr__(self, name: str) -> Any:
        """A registered option that is not a field: its value (its default unless set)."""
        option = QUANT_OPTIONS.get(name)
        if option is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return dict(self.__dict__.get("extra", ())).get(name, option.default)

    def values(self) -> dict[str, Any]:
        """Every quantization option (`QUANT_OPTIONS`) -> its value here."""
        return {name: getattr(self, name) for name in QUANT_OPTIONS}

    def auto_knobs(self) -> tuple[str, ...]:
        """The recipe knobs left "auto", for the search to set."""
        return tuple(k for k in RECIPE_KNOBS if getattr(self, k) == AUTO)

    @classmethod
    def of(cls, options: QuantOptions | None = None, **keywords: Any) -> QuantOptions:
        """`options` (default: the defaults) with `keywords` set, each a field or a registered option by name."""
        base = options if options is not None else cls()
        if not isinstance(base, QuantOptions):
            raise CompileError(f"options must be a QuantOptions, got {type(base).__name__}")
        unknown = sorted(k for k in keywords if k not in option_names())
        if unknown:
            raise CompileError(f"unknown quantization option {unknown[0]!r}; use one of {', '.join(option_names())}")
        return replace(base, **keywords) if keywords else base


BUILT_IN = frozenset(QUANT_OPTIONS)
"""The options declared here (no technique module can take them back)."""


def option_names() -> tuple[str, ...]:
    """QuantOptions' keywords: its fields and the registered options, sorted."""
    return tuple(sorted(({f.name for f in fields(QuantOptions)} - {"extra"}) | set(QUANT_OPTIONS)))


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
        quant_names = set(option_names())  # QuantOptions' fields and the options techniques registered
        unknown = sorted(k for k in keywords if k not in own and k not in quant_names)
        if unknown:
            raise CompileError(f"unknown compile option {unknown[0]!r}; use one of "
                               f"{', '.join(sorted((own - {'quant'}) | quant_names))}")
        quant = {k: v for k, v in keywords.items() if k in quant_names}
        mine = {k: v for k, v in keywords.items() if k in own}
        if quant:
            mine["quant"] = replace(mine.get("quant", base.quant), **quant)
        return replace(base, **mine) if mine else base
