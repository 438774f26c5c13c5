"""Every name a package exports in `__all__` imports: a lazy `__getattr__` table or a re-export
that points at a moved or deleted module fails here, not in a user's first `from vtakit.x import y`."""

from __future__ import annotations

import importlib
import pkgutil

import pytest


def _packages(name: str = "vtakit") -> list[str]:
    """vtakit and every package below it (the layers are reached through vtakit/'s symlinks)."""
    found = [name]
    for info in pkgutil.iter_modules(importlib.import_module(name).__path__):
        if info.ispkg:
            found += _packages(f"{name}.{info.name}")
    return found


PACKAGES = _packages()


def test_the_walk_reaches_every_layer():
    for layer in ("isa", "sim", "hw", "compiler", "scheduling", "fpga"):
        assert f"vtakit.{layer}" in PACKAGES
    assert "vtakit.compiler.backends.vta" in PACKAGES


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_imports(package: str):
    module = importlib.import_module(package)
    exported = list(getattr(module, "__all__", []))
    assert len(exported) == len(set(exported)), f"{package}.__all__ repeats a name"
    missing = []
    for name in exported:
        try:
            getattr(module, name)
        except (AttributeError, ImportError) as exc:
            missing.append(f"{name}: {exc}")
    assert not missing, f"{package} exports names that do not import: {missing}"


def test_fpga_board_presets_are_the_hw_ones():
    """The board presets live in vtakit.hw.boards; vtakit.fpga re-exports the same objects."""
    import vtakit.fpga as fpga
    from vtakit.hw import boards

    assert fpga.BOARDS is boards.BOARDS
    assert fpga.board("pynq-z1") is boards.board("pynq-z1")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        getattr(fpga, "nothing")

