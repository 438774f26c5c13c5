"""The SPACE.toml format of `vtakit explore`: which accelerator configurations to sweep.

    [base]                      # the configuration every point starts from
    preset = "pynq"             # a preset name or a vtakit/VTA JSON file; other keys override it
    alu_mul = true

    [sweep]                     # the grid: every combination, in key order
    block = [8, 16, 32]         # shorthand for block_in = block_out
    bus_bytes = [8, 16]
    clock_mhz = [100, 200]

    [[point]]                   # explicit points besides the grid (changes to [base])
    name = "2x16, bigger inp"   # optional
    batch = 2
    inp_buff_bytes = 65536

    [options]
    network = "resnet18"        # the default for --network: a zoo name or an .onnx path
    parts = "all"               # "all" or a list of hw.synth.PARTS names whose fit is reported
    part = "xc7z020"            # the part whose resource figures the Pareto front uses
    synth = true                # false: latency only, no Yosys
    images = 1                  # inputs per run; "batch" = the configuration's batch
    seed = 0                    # seed of the input the cycle model runs

A malformed file, an unknown field or a value of the wrong type is an error up
front (one line naming the table and key).  A point whose values make no valid
HwConfig (a block that is not a power of two, a buffer too small) is not an
error: it stays in the sweep as a failure with its reason, so a report shows
what could not be built instead of silently dropping it.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from vtakit.errors import ConfigError
from vtakit.hw.synth import PARTS
from vtakit.isa.config import DEFAULT_PRESET, HwConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: tomli, its backport, a dependency there
    import tomli as tomllib

BLOCK_SHORTHAND = "block"
"""A sweep/point key that sets block_in and block_out together."""
_CONFIG_FIELDS = {f.name: f.type for f in fields(HwConfig)}
_TABLES = ("base", "sweep", "point", "options")
_OPTIONS = ("network", "parts", "part", "synth", "images", "seed")


@dataclass(frozen=True)
class DesignPoint:
    """One configuration of the sweep: a HwConfig, or the reason there is none."""

    index: int
    name: str                                   # e.g. "block=16 bus_bytes=8 clock_mhz=100"
    changes: tuple[tuple[str, Any], ...]        # the swept values, as written
    config: HwConfig | None
    error: str | None = None                    # why `changes` make no valid HwConfig
    base: HwConfig = field(default_factory=HwConfig)   # what `changes` apply to

    def requested(self) -> dict[str, Any]:
        """Every HwConfig parameter as asked for (valid or not): the base with the changes applied."""
        return {**dataclasses.asdict(self.base), **_expand(self.changes)}

    @property
    def ok(self) -> bool:
        return self.config is not None


@dataclass(frozen=True)
class ExploreOptions:
    network: str | None = None
    parts: tuple[str, ...] = ()                 # empty: every part in hw.synth.PARTS
    part: str | None = None                     # empty: the first of `parts`
    synth: bool = True
    images: int | str = 1                       # an int, or "batch"
    seed: int = 0

    def resolved_parts(self) -> tuple[str, ...]:
        return self.parts or tuple(PARTS)

    def primary_part(self) -> str:
        return self.part or self.resolved_parts()[0]


@dataclass(frozen=True)
class DesignSpace:
    base: HwConfig
    points: tuple[DesignPoint, ...]
    options: ExploreOptions = field(default_factory=ExploreOptions)
    source: str = "<space>"


# ----------------------------------------------------------------- parsing
def load_space(path: str | Path) -> DesignSpace:
    """Read and expand a SPACE.toml file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read design space {p}: {e.strerror}") from None
    return parse_space(text, source=str(p))


def parse_space(text: str, source: str = "<space>") -> DesignSpace:
    """Expand SPACE.toml text into points (grid product of [sweep], then each [[point]])."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # its message has the line and column
        raise ConfigError(f"{source}: not valid TOML ({e})") from None
    for table in data:
        if table not in _TABLES:
            raise ConfigError(f"unknown table in {source} (known: {', '.join(_TABLES)})", field=table)
    base = _base_config(_table(data, "base", source), source)
    sweep = _table(data, "sweep", source)
    extra = data.get("point", [])
    if not isinstance(extra, list) or not all(isinstance(e, dict) for e in extra):
        raise ConfigError(f"{source}: [[point]] must be an array of tables")
    options = _options(_table(data, "options", source), source)

    grid: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    for key, values in sweep.items():
        _check_key(key, f"[sweep] of {source}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"[sweep] of {source}: must be a non-empty list of values", field=key)
        for v in values:
            _check_value(key, v, f"[sweep] of {source}")
    if sweep:
        keys = list(sweep)
        for combo in itertools.product(*(sweep[k] for k in keys)):
            changes = tuple(zip(keys, combo))
            grid.append((_name(changes), changes))
    for i, entry in enumerate(extra):
        where = f"[[point]] {i + 1} of {source}"
        entry = dict(entry)
        name = entry.pop("name", None)
        if name is not None and not isinstance(name, str):
            raise ConfigError(f"{where}: must be a string", field="name")
        for key, value in entry.items():
            _check_key(key, where)
            _check_value(key, value, where)
        changes = tuple(entry.items())
        grid.append((name or _name(changes) or "base", changes))
    if not grid:
        grid.append(("base", ()))
    points = tuple(_point(i, name, changes, base) for i, (name, changes) in enumerate(grid))
    return DesignSpace(base=base, points=points, options=options, source=source)


def _table(data: dict, name: str, source: str) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: [{name}] must be a table")
    return value


def _base_config(table: dict, source: str) -> HwConfig:
    table = dict(table)
    preset = table.pop("preset", DEFAULT_PRESET)
    if not isinstance(preset, str):
        raise ConfigError(f"[base] of {source}: must be a preset name or a JSON file", field="preset")
    relative = Path(source).parent / preset
    cfg = HwConfig.load(relative if preset.endswith(".json") and relative.is_file() else preset)
    for key, value in table.items():
        _check_key(key, f"[base] of {source}")
        _check_value(key, value, f"[base] of {source}")
    try:
        return cfg.replace(**_expand(tuple(table.items())))
    except ConfigError as e:
        raise ConfigError(f"[base] of {source}: {e.detail}", field=e.field) from None


def _options(table: dict, source: str) -> ExploreOptions:
    where = f"[options] of {source}"
    for key in table:
        if key not in _OPTIONS:
            raise ConfigError(f"{where}: unknown option (known: {', '.join(_OPTIONS)})", field=key)
    network = table.get("network")
    if network is not None and not isinstance(network, str):
        raise ConfigError(f"{where}: must be a zoo name or an .onnx path", field="network")
    parts = table.get("parts", "all")
    if parts == "all":
        parts = ()
    elif isinstance(parts, list) and parts and all(isinstance(p, str) for p in parts):
        parts = tuple(parts)
    else:
        raise ConfigError(f"{where}: must be \"all\" or a list of part names", field="parts")
    part = table.get("part")
    for name in parts + ((part,) if part is not None else ()):
        if name not in PARTS:
            raise ConfigError(f"{where}: unknown part {name!r} (known: {', '.join(PARTS)})",
                              field="part" if name == part else "parts")
    if part is not None and parts and part not in parts:
        parts = (part, *parts)
    synth = table.get("synth", True)
    if not isinstance(synth, bool):
        raise ConfigError(f"{where}: must be true or false", field="synth")
    images = table.get("images", 1)
    if not (images == "batch" or (isinstance(images, int) and not isinstance(images, bool) and images >= 1)):
        raise ConfigError(f"{where}: must be a positive integer or \"batch\"", field="images")
    seed = table.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"{where}: must be an integer", field="seed")
    return ExploreOptions(network=network, parts=parts, part=part, synth=synth, images=images, seed=seed)


def _check_key(key: str, where: str) -> None:
    if key == "preset":
        raise ConfigError(f"{where}: a preset belongs in [base]", field=key)
    if key != BLOCK_SHORTHAND and key not in _CONFIG_FIELDS:
        raise ConfigError(f"{where}: not a HwConfig field ('{BLOCK_SHORTHAND}' sets block_in and block_out)",
                          field=key)


def _check_value(key: str, value: Any, where: str) -> None:
    """Reject values of the wrong kind up front; ranges are HwConfig's to judge, per point."""
    kind = _CONFIG_FIELDS.get(key, "int")
    ok = {"int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "bool": isinstance(value, bool),
          "str": isinstance(value, str)}.get(kind, True)
    if not ok:
        wanted = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}[kind]
        raise ConfigError(f"{where}: must be {wanted}, got {value!r}", field=key)


def _expand(changes: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in changes:
        if key == BLOCK_SHORTHAND:
            out["block_in"] = out["block_out"] = value
        else:
            out[key] = float(value) if _CONFIG_FIELDS[key] == "float" else value
    return out


def _name(changes: tuple[tuple[str, Any], ...]) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in changes)


def _point(index: int, name: str, changes: tuple[tuple[str, Any], ...], base: HwConfig) -> DesignPoint:
    try:
        cfg = base.replace(**_expand(changes))
    except ConfigError as e:
        return DesignPoint(index, name, changes, None, str(e), base)
    return DesignPoint(index, name, changes, cfg, None, base)
