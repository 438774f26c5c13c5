"""The layering the README's map promises: packages import each other without cycles, and every
place that names devices reads them from the one registry."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import vtakit
from vtakit.devices import ACCELERATOR, HOST, device_names, open_device, register_device
from vtakit.errors import DeviceError
from vtakit.isa import HwConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SHARED = {"vtakit", "vtakit.errors", "vtakit.devices"}   # the import root's small shared modules


def _package_dirs() -> dict[str, Path]:
    """Every package under the import root (through its links to the top-level folders) -> its folder."""
    return {".".join(init.parent.relative_to(ROOT).parts): init.parent
            for init in _walk(ROOT / "vtakit") if init.name == "__init__.py"}


def _walk(folder: Path):
    """Every file under `folder`, following the links `vtakit/isa -> ../isa` (Path.rglob does not)."""
    import os

    for parent, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        yield from (Path(parent) / f for f in files)


def _layer(module: str) -> str:
    """The layer a module belongs to: vtakit.<first part> (vtakit.compiler.backends.cpu -> vtakit.compiler)."""
    return ".".join(module.split(".")[:2])


def import_graph() -> dict[str, set[str]]:
    """Layer -> layers it imports (module-level and function-level imports alike)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for package, folder in _package_dirs().items():
        for path in folder.glob("*.py"):
            source = _layer(package) if package != "vtakit" else f"vtakit.{path.stem}"
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                         else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                for name in names:
                    target = _layer(name)
                    if name.startswith("vtakit.") and target != source and target not in SHARED:
                        edges[source].add(target)
    return edges


def test_layers_import_each_other_without_cycles():
    edges = import_graph()
    seen, stack = set(), []

    def visit(node: str) -> None:
        if node in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if node in seen:
            return
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            visit(target)
        stack.pop()
        seen.add(node)

    for node in sorted(edges):
        visit(node)
    assert "vtakit.hw" not in edges["vtakit.sim"] and "vtakit.fpga" not in edges["vtakit.compiler"]


def test_the_registry_knows_every_device_and_the_cli_offers_them():
    from vtakit.cli import build_parser

    assert {"fsim", "sim", "rtl", "pynq-sim", "pynq"} <= set(device_names(ACCELERATOR))
    assert set(device_names(HOST)) == {"cpu", "cuda"}
    assert "fsim" not in device_names(ACCELERATOR, counts_cycles=True)
    run = build_parser().parse_args(["run", "m.vtamod", "--input", "x.npy", "--device", "pynq-sim"])
    assert run.device == "pynq-sim"


def test_a_registered_device_runs_operators_and_modules():
    from vtakit.compiler.backends.vta import ops
    from vtakit.sim import SimDevice

    opened = []

    def factory(config, **options):
        opened.append(config.label)
        return SimDevice(config, model="functional", **options)

    register_device("test-functional", factory, description="a test device", counts_cycles=False)
    cfg = HwConfig.preset("pynq")
    assert open_device("test-functional", cfg).model == "functional" and opened == ["pynq"]
    import numpy as np

    x = np.arange(-64, 64, dtype=np.int32).reshape(1, 128, 1, 1) * 4
    y, _ = ops.requantize(x, shift=2, config=cfg, device="test-functional")
    np.testing.assert_array_equal(y, (x // 4).astype(np.int8))
    with pytest.raises(DeviceError, match="unknown device 'nope'"):
        open_device("nope", cfg)
    with pytest.raises(DeviceError, match="not an accelerator Device"):
        open_device("cpu", cfg)


def test_compile_defaults_to_the_default_preset():
    assert vtakit.compile.__defaults__[0] == vtakit.isa.DEFAULT_PRESET


def test_every_layer_folder_is_a_package_under_the_import_root():
    """The top-level folders reach `vtakit.*` through relative links, so a wheel and static tools see them;
    packages are found, never listed, so none can be forgotten."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in config and config["packages"] == {"find": {"include": ["vtakit*"]}}
    for layer in ("isa", "sim", "hw", "compiler", "scheduling", "fpga"):
        link = ROOT / "vtakit" / layer
        assert link.is_symlink() and str(link.readlink()) == f"../{layer}", layer
        assert (ROOT / layer / "__init__.py").is_file()
    folders = {f for f in _walk(ROOT / "vtakit") if f.suffix == ".py"}
    orphans = sorted(str(f.parent.relative_to(ROOT)) for f in folders if not (f.parent / "__init__.py").is_file())
    assert not orphans, f"python files in folders without __init__.py (a wheel would lose them): {orphans}"


def test_a_built_wheel_installs_and_runs_the_layer_demo(tmp_path):
    """The wheel alone (no editable finder in the way): `vtakit demo --layer C2` from it."""
    import os
    import subprocess

    import shutil

    wheels = tmp_path / "wheels"
    had_build = (ROOT / "build").exists()     # setuptools builds in the source tree; leave it as it was
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                       check=True, timeout=600)
    finally:
        if not had_build:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    wheel = next(wheels.glob("vtakit-*.whl"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, timeout=600)
    env = dict(os.environ, PYTHONPATH=str(target))
    code = ("import sys, vtakit; from vtakit.cli import main; "
            f"assert vtakit.__file__.startswith({str(target)!r}), vtakit.__file__; "
            "sys.exit(main(['demo', '--layer', 'C2', '--trace', sys.argv[1]]))")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "trace.json")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "result matches numpy: yes" in run.stdout
