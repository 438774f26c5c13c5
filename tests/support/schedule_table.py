"""The default heuristic's choices, recorded: every convolution shape the zoo networks ask
`default_conv_knobs` for when compiled for `pynq`, and ResNet-18's layers C1-C11 on every preset.
`tests/unit/compiler/backends/vta/test_schedule_table.py` checks the heuristic still picks each of them,
so a faster search (issue 43) cannot change a schedule unnoticed.

    .venv/bin/python -m tests.support.schedule_table     # re-record (minutes: compiles five networks)

Re-record only when changing the choices is the point (a refit of `heuristics.FIT`, a cost-model fix).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.backends.vta import heuristics, ops, packing
from vtakit.compiler.backends.vta.heuristics import CostFit, ConvShape
from vtakit.compiler.backends.vta.layers import RESNET18
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from vtakit.scheduling.task import task_from_layer

TABLE = Path(__file__).with_name("default_schedules.json")
NETWORKS = ("digits_cnn", "small_cnn", "mobilenet_v1", "resnet18", "resnet34")
CALLERS = (heuristics, ops, packing)
"""The modules that hold `default_conv_knobs` by name (each is patched while a network compiles)."""

Case = tuple[HwConfig, ConvShape, "int | None", CostFit]


def choice(cfg: HwConfig, shape: ConvShape, vthreads: int | None, fit: CostFit) -> dict[str, Any]:
    """The heuristic's knobs as a dict, or the one line it refuses the shape with."""
    try:
        return heuristics.default_conv_knobs(cfg, shape, vthreads, fit).to_dict()
    except CompileError as e:
        return {"error": str(e)}


@contextmanager
def asked(into: dict[tuple, Case]) -> Iterator[None]:
    """Record every (config, shape, vthreads, fit) `default_conv_knobs` is asked for while the block runs."""
    original = heuristics.default_conv_knobs

    def recording(cfg: HwConfig, s: ConvShape, vthreads: int | None = None, fit: CostFit = heuristics.FIT):
        into[(cfg, s, vthreads, fit)] = (cfg, s, vthreads, fit)
        return original(cfg, s, vthreads, fit)

    for module in CALLERS:
        setattr(module, "default_conv_knobs", recording)
    try:
        yield
    finally:
        for module in CALLERS:
            setattr(module, "default_conv_knobs", original)


def network_cases(name: str) -> list[Case]:
    """The shapes compiling zoo network `name` for pynq (seeded calibration) asks the heuristic about."""
    seen: dict[tuple, Case] = {}
    with asked(seen):
        vtakit.compile(zoo.build(name), "pynq")
    return list(seen.values())


def layer_cases() -> list[Case]:
    """ResNet-18's C1-C11 (VTA's benchmark epilogue) on every preset, with the heuristic's own thread
    count and with each fixed one."""
    cases: list[Case] = []
    for preset in HwConfig.preset_names():
        cfg = HwConfig.preset(preset)
        for layer in RESNET18:
            shape = task_from_layer(layer, cfg).shape
            cases += [(cfg, shape, vt, heuristics.FIT) for vt in (None, 1, 2, 4)]
    return cases


def config_spec(cfg: HwConfig) -> str | dict[str, Any]:
    return cfg.preset_name or cfg.to_dict()


def config_of(spec: str | dict[str, Any]) -> HwConfig:
    return HwConfig.preset(spec) if isinstance(spec, str) else HwConfig.from_dict(spec)


def row(case: Case, where: str) -> dict[str, Any]:
    cfg, shape, vthreads, fit = case
    return {"where": where, "config": config_spec(cfg), "shape": asdict(shape), "vthreads": vthreads,
            "fit": asdict(fit), "choice": choice(cfg, shape, vthreads, fit)}


def case_of(r: dict[str, Any]) -> Case:
    fit = dict(r["fit"], vthreads=tuple(r["fit"]["vthreads"]))
    return config_of(r["config"]), ConvShape(**r["shape"]), r["vthreads"], CostFit(**fit)


def record() -> list[dict[str, Any]]:
    rows: dict[tuple, dict[str, Any]] = {}
    for name in NETWORKS:
        for case in network_cases(name):
            rows.setdefault(case, row(case, name))
        print(f"{name}: {len(rows)} distinct cases so far", flush=True)
    for case in layer_cases():
        rows.setdefault(case, row(case, "C1-C11"))
    return list(rows.values())


def main() -> None:
    rows = record()
    TABLE.write_text(json.dumps(rows, indent=None, separators=(",", ":")).replace('},{"where"', '},\n{"where"')
                     + "\n")
    print(f"{len(rows)} cases written to {TABLE}")


if __name__ == "__main__":
    main()
