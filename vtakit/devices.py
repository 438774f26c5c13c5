"""The one registry of where programs run: device names -> factories.

    dev = open_device("sim", cfg)            # a Device (config, dram, alloc, run)
    register_device("myboard", MyDevice)     # a new device: one call

Accelerator devices implement the Device protocol (`vtakit.sim.device`); host
devices ("cpu", "cuda") are names the graph runtime understands: every node of a
module on that host backend.  Each package registers its own devices when it is
imported (`sim` the simulators, `hw` the RTL, `fpga` the board and the
simulated board, the graph runtime the hosts); the registry imports those
providers only when a name is looked up, so no package imports another just to
know its device names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vtakit.errors import DeviceError, pc_side_missing

ACCELERATOR = "accelerator"
HOST = "host"

# Modules that call register_device when imported, loaded on the first lookup: a plugin registry, not an
# import of a dependency (each provider imports this module to register, so importing them here at the top
# would be a circle).
_PROVIDERS = ("vtakit.sim.device", "vtakit.hw.device", "vtakit.fpga.driver", "vtakit.fpga.simulated_device", "vtakit.compiler.module.compiled")


@dataclass(frozen=True)
class DeviceEntry:
    name: str
    factory: Callable[..., Any] | None   # (config, **options) -> Device; None for host devices
    kind: str                            # ACCELERATOR or HOST
    description: str
    counts_cycles: bool


_registry: dict[str, DeviceEntry] = {}
_loaded = False


def register_device(name: str, factory: Callable[..., Any] | None, *, kind: str = ACCELERATOR,
                    description: str = "", counts_cycles: bool = True) -> None:
    """Make `name` open with `factory(config, **options)` (a later registration replaces an earlier one)."""
    if kind not in (ACCELERATOR, HOST):
        raise DeviceError(f"device {name!r}: kind must be {ACCELERATOR!r} or {HOST!r}, got {kind!r}")
    if kind == ACCELERATOR and factory is None:
        raise DeviceError(f"accelerator device {name!r} needs a factory")
    _registry[name] = DeviceEntry(name, factory, kind, description, counts_cycles)


def _load_providers() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in _PROVIDERS:
            try:
                importlib.import_module(module)
            except ImportError as missing:  # a board's runtime has no Verilator: no "rtl" device there
                pc_side_missing(missing)


def device_entry(name: str) -> DeviceEntry:
    """The registered entry of `name` (DeviceError listing the known names otherwise)."""
    _load_providers()
    try:
        return _registry[name]
    except KeyError:
        raise DeviceError(f"unknown device {name!r}; use one of {', '.join(device_names())} "
                          f"or a Device object") from None


def device_names(kind: str | None = None, *, counts_cycles: bool | None = None) -> tuple[str, ...]:
    """Registered names (of one kind, or only those that count cycles), in registration order."""
    _load_providers()
    return tuple(e.name for e in _registry.values() if (kind is None or e.kind == kind)
                 and (counts_cycles is None or e.counts_cycles == counts_cycles))


def open_device(name: str, config: Any, **options: Any) -> Any:
    """A fresh accelerator device `name` built for `config`."""
    entry = device_entry(name)
    if entry.kind != ACCELERATOR:
        raise DeviceError(f"device {name!r} runs every node on the host; it is not an accelerator Device")
    return entry.factory(config, **options)
