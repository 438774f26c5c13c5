"""Registers `pynq-sim`: the PYNQ driver on the simulated board, as a device any command can open.

A module of its own so that the driver never imports the simulated board (which imports the driver)
and so that looking devices up does not need pynq, which the simulated board imports.
"""

from __future__ import annotations

from vtakit.devices import register_device
from vtakit.isa.config import HwConfig


def open_simulated_pynq(config: HwConfig, **options):
    """A PynqDevice on a simulated board for `config` (`vtakit.fpga.simboard.simulated_pynq`)."""
    from vtakit.fpga.simboard import simulated_pynq  # lazy: pynq (the simulated board imports it)

    return simulated_pynq(config, **options)


register_device("pynq-sim", open_simulated_pynq, description="the PYNQ driver on the simulated board (RTL)")
