"""`vtakit fpga project`'s top level through Yosys's full synth_xilinx for two boards: it fits, with DSPs
and block RAM (the project's files and checks: tests/unit/fpga/test_project.py)."""

import pytest

from vtakit.hw.boards import BOARDS
from vtakit.hw.synth import synth


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pynq-z1", "ultra96-v2"])
def test_yosys_synthesizes_the_project_top(name):
    """Full synth_xilinx of the same sources (minutes; cached by hw.synth afterwards)."""
    b = BOARDS[name]
    result = synth(b.config, b.device)
    assert result.fits and result.dsp > 0 and result.bram36 > 0
