"""Static timing (hw.sta, hw.timing): Yosys's cell delays parsed, longest paths, the cached estimate."""

from __future__ import annotations

import gzip
import json

import pytest

from vtakit.errors import RtlError

from vtakit.hw import synth
from vtakit.hw.sta import Netlist, critical_path, dsp48e1_model, parse_specify, xilinx_library
from vtakit.hw.timing import NET_DELAY_NS, XCUP_SCALE, timing
from vtakit.isa.config import HwConfig

from tests.support.fake_netlists import fake_netlist


def test_library_has_the_7_series_delays():
    lib = xilinx_library()
    assert ("I0", None, "O", None, 642, False) in lib["LUT6"].comb
    assert max(ps for _, ps, _ in lib["FDRE"].launch) == 303
    assert max(ps for port, ps, _ in lib["RAMB36E1"].launch if port == "DOADO") == 2454
    assert ("CI", None, "CO", 3, 114, False) in lib["CARRY4"].comb
    comb = dsp48e1_model({"AREG": "0", "BREG": "0", "MREG": "0", "PREG": "0", "USE_MULT": "MULTIPLY"}).comb
    assert ("A", None, "P", None, 2823, True) in comb
    assert dsp48e1_model({"PREG": "1"}).launch == [("P", 329, "")]


def test_parse_specify_conditions_and_setup():
    text = """
module X(input C, input D, input [1:0] A, output Q, output [1:0] O);
  specify
    $setup(D, posedge C &&& CE, 12);
    if (&DO_REG) (posedge C => (Q : 1'bx)) = 900;
    (A[1] => O[0]) = 40;
    (A *> O) = 30; // comment
  endspecify
endmodule
"""
    m = parse_specify(text)["X"]
    assert m.capture == [("D", None, 12)] and m.launch == [("Q", 900, "&DO_REG")]
    assert m.comb == [("A", 1, "O", 0, 40, False), ("A", None, "O", None, 30, True)]


def test_longest_path_and_net_delay():
    net = Netlist(fake_netlist(3), "vta_top")
    lib = xilinx_library()
    logic, unknown = critical_path(net, lib)
    assert logic.delay_ps == 303 + 3 * 642 and logic.levels == 3 and not unknown
    assert logic.start == "FDRE src_reg" and logic.end == "FDRE.D dst_reg"
    routed, _ = critical_path(net, lib, net_ps=500)
    assert routed.delay_ps == 303 + 3 * (642 + 500) + 500
    assert critical_path(net, lib, unit="dst_reg")[0].delay_ps == logic.delay_ps
    with pytest.raises(RtlError, match="no timed path"):
        critical_path(net, lib, unit="compute")


def test_carry_chain_takes_no_routed_net_delay():
    d = fake_netlist(1)
    cells = d["modules"]["vta_top"]["cells"]
    lut_out = cells["l0"]["connections"]["O"][0]
    cells["c0"] = {"type": "CARRY4", "parameters": {}, "connections": {
        "CI": ["0"], "CYINIT": ["0"], "DI": ["0"] * 4, "S": [lut_out, "0", "0", "0"], "O": [20, 21, 22, 23],
        "CO": [24, 25, 26, 27]}}
    cells["c1"] = {"type": "CARRY4", "parameters": {}, "connections": {
        "CI": [27], "CYINIT": ["0"], "DI": ["0"] * 4, "S": ["0"] * 4, "O": [30, 31, 32, 33], "CO": [34, 35, 36, 37]}}
    cells["r1"]["connections"]["D"] = [37]
    routed, _ = critical_path(Netlist(d, "vta_top"), xilinx_library(), net_ps=500)
    # FF, net, LUT, net, S[0]->CO[3], carry (no net), CI->CO[3], net, setup
    assert routed.delay_ps == 303 + 500 + 642 + 500 + 508 + 114 + 500


def _fake_yosys(cfg, part, out, timeout_s):
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "netlist.json.gz", "wt") as f:
        json.dump(fake_netlist(5), f)
    (out / "cells.json").write_text(json.dumps({"cells": {"LUT6": 5, "FDRE": 2}, "seconds": 0.0}))
    _fake_yosys.runs += 1


def test_timing_is_cached_and_scaled_for_ultrascale(tmp_path, monkeypatch):
    monkeypatch.setenv("VTAKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(synth, "_run_yosys", _fake_yosys)
    _fake_yosys.runs = 0
    pynq = timing(HwConfig.preset("pynq"))
    routed = (303 + 5 * (642 + 500) + 500) / 1000
    assert pynq.part == "xc7z020" and pynq.routed_ns == pytest.approx(routed) and pynq.meets
    assert pynq.slack_ns == pytest.approx(10 - routed) and pynq.fmax_mhz == pytest.approx(1000 / routed, abs=0.1)
    assert pynq.logic_ns == pytest.approx((303 + 5 * 642) / 1000) and pynq.levels == 5
    u96 = timing(HwConfig.preset("ultra96"))           # 333 MHz on the xczu3eg: the xc7 netlist, scaled
    assert u96.part == "xczu3eg" and u96.scale == XCUP_SCALE
    assert u96.routed_ns == pytest.approx(routed * XCUP_SCALE, abs=1e-3) and not u96.meets
    runs = _fake_yosys.runs
    assert timing(HwConfig.preset("pynq")).to_dict() == pynq.to_dict() and _fake_yosys.runs == runs
    assert NET_DELAY_NS == 0.5


def test_hw_synth_prints_the_estimate(tmp_path, monkeypatch, capsys):
    from vtakit.cli import main

    monkeypatch.setenv("VTAKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(synth, "_run_yosys", _fake_yosys)
    _fake_yosys.runs = 0
    assert main(["hw", "synth", "--config", "pynq"]) == 0
    out = capsys.readouterr().out
    assert "logic delay 3.51 ns over 5 levels" in out and "fmax ~154 MHz" in out and "+3.49 ns" in out
    assert main(["hw", "synth", "--config", "pynq", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["timing"]["meets"] is True
    assert main(["hw", "synth", "--config", "pynq", "--json", "--no-timing"]) == 0
    assert "timing" not in json.loads(capsys.readouterr().out)
