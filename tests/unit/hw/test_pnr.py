"""hw.pnr: nextpnr's report read back, results cached; the real run (tens of minutes) is not in the tests."""

from __future__ import annotations

import json

from vtakit.hw import pnr as pnr_mod
from vtakit.isa.config import HwConfig

# the shape of nextpnr-ecp5's --report (0.11), cut down from the 1x8 run
REPORT = {
    "fmax": {"clk": {"achieved": 21.699504852294922, "constraint": 100}},
    "critical_paths": [{"from": "posedge clk", "to": "posedge clk", "path": [
        {"type": "clk-to-q", "delay": 5.83, "from": {"cell": "g_cmd[1].queue.ram.mem.0.1", "port": "DOB10"}},
        {"type": "routing", "delay": 4.425, "net": "n1"},
        {"type": "logic", "delay": 0.236},
        {"type": "routing", "delay": 0.5, "net": "n2"},
        {"type": "setup", "delay": 0.1}]}],
    "utilization": {"DP16KD": {"available": 208, "used": 79}, "TRELLIS_COMB": {"available": 83640, "used": 20430},
                    "EHXPLLL": {"available": 4, "used": 0}},
}


def test_report_gives_fmax_and_the_critical_paths_split():
    got = pnr_mod.parse_report(REPORT)
    assert got["fmax_mhz"] == 21.7 and got["critical_ns"] == 46.08
    assert got["logic_ns"] == round(5.83 + 0.236 + 0.1, 2) and got["routing_ns"] == round(4.925, 2)
    assert got["cells"] == {"DP16KD": 79, "TRELLIS_COMB": 20430}


def test_pnr_is_cached_and_printed(tmp_path, monkeypatch, capsys):
    from vtakit.cli import main

    runs = []

    def fake_run(cfg, out, timeout_s):
        runs.append(cfg.label)
        return {"config": cfg.label, "device": "LFE5U-85F", "clock_mhz": cfg.clock_mhz, "synth_s": 1.0,
                "pnr_s": 2.0, **pnr_mod.parse_report(REPORT)}

    monkeypatch.setenv("VTAKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(pnr_mod, "_run", fake_run)
    first = pnr_mod.pnr(HwConfig.preset("1x8"))
    assert pnr_mod.pnr(HwConfig.preset("1x8")) == first and runs == ["1x8"]
    assert main(["hw", "pnr", "--config", "1x8"]) == 0 and runs == ["1x8"]
    out = capsys.readouterr().out
    assert "post-route fmax 21.7 MHz" in out and "not a Xilinx figure" in out
    assert main(["hw", "pnr", "--config", "1x8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fmax_mhz"] == 21.7
