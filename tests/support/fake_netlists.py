"""A Yosys JSON netlist small enough to write by hand, for tests that stand in for synthesis."""


def fake_netlist(luts: int) -> dict:
    """A register, `luts` LUT6s in a row (through I0, 642 ps each) and a register, as Yosys writes it:
    303 + luts * (642 + 500) + 500 ps with hw.timing's 0.5 ns per net (5 LUTs: 153.5 MHz)."""
    cells = {"r0": {"type": "FDRE", "parameters": {}, "connections": {"C": [2], "CE": ["1"], "R": ["0"],
                                                                       "D": [3], "Q": [10]}}}
    for k in range(luts):
        cells[f"l{k}"] = {"type": "LUT6", "parameters": {"INIT": "0" * 64},
                          "connections": {"I0": [10 + k], **{f"I{i}": ["0"] for i in range(1, 6)}, "O": [11 + k]}}
    cells["r1"] = {"type": "FDRE", "parameters": {}, "connections": {"C": [2], "CE": ["1"], "R": ["0"],
                                                                      "D": [10 + luts], "Q": [4]}}
    return {"modules": {"vta_top": {
        "attributes": {}, "ports": {"clk": {"direction": "input", "bits": [2]},
                                    "d": {"direction": "input", "bits": [3]}, "q": {"direction": "output", "bits": [4]}},
        "cells": cells, "netnames": {"src_reg": {"hide_name": 0, "bits": [10]},
                                     "dst_reg": {"hide_name": 0, "bits": [4]}}}}}
