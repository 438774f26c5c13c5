"""Design-space exploration: the SPACE.toml format, jobs on three executors, the outputs, the CLI."""

from __future__ import annotations

import csv
import gzip
import json

import pytest

from vtakit.errors import ConfigError, RtlError
from vtakit.isa.config import PRESETS
from vtakit.scheduling.design_space import parse_space
from vtakit.scheduling.executor import executor
from vtakit.scheduling.explore import JOB_LOG, explore, netlist_config, pareto_front
from vtakit.scheduling.explore_report import write_outputs

from tests.support.fake_netlists import fake_netlist

# digits_cnn compiles and simulates in well under a second per configuration.
SMALL_SPACE = """
[base]
preset = "pynq"

[sweep]
clock_mhz = [100, 200]

[[point]]
name = "1x8"
block = 8
uop_buff_bytes = 16384
inp_buff_bytes = 8192
wgt_buff_bytes = 65536
acc_buff_bytes = 32768

[[point]]
name = "no room for weights"
wgt_buff_bytes = 512

[[point]]
block = 12

[[point]]
name = "256-bit port"
bus_bytes = 32
mem_burst_beats = 128

[options]
network = "digits_cnn"
parts = ["xc7z010", "xc7z020"]
"""


# ------------------------------------------------------------------ the format
def test_space_expands_grid_then_points_with_block_shorthand():
    space = parse_space("""
[base]
preset = "pynq"
alu_mul = true
[sweep]
block = [16, 32]
clock_mhz = [100, 250]
[[point]]
name = "wide port"
bus_bytes = 16
""")
    names = [p.name for p in space.points]
    assert names == ["block=16 clock_mhz=100", "block=16 clock_mhz=250", "block=32 clock_mhz=100",
                     "block=32 clock_mhz=250", "wide port"]
    cfgs = [p.config for p in space.points]
    assert all(c.alu_mul for c in cfgs)
    assert [(c.block_in, c.block_out, c.clock_mhz) for c in cfgs[:4]] == [(16, 16, 100.0), (16, 16, 250.0),
                                                                         (32, 32, 100.0), (32, 32, 250.0)]
    assert isinstance(cfgs[1].clock_mhz, float) and cfgs[4].bus_bytes == 16 and cfgs[4].block_in == 16
    assert space.options.synth and space.options.parts == () and space.options.images == 1


def test_unbuildable_point_is_kept_with_its_reason():
    space = parse_space(SMALL_SPACE)
    bad = [p for p in space.points if not p.ok]
    assert [p.name for p in bad] == ["block=12"]
    assert "block_in" in bad[0].error and "power of two" in bad[0].error
    assert bad[0].requested()["block_out"] == 12


@pytest.mark.parametrize("text, field", [
    ("[sweep]\nblock = [16", None),                                   # not TOML
    ("[sweeps]\nblock = [16]", "sweeps"),                             # unknown table
    ("[sweep]\nblok = [16]", "blok"),                                 # not a HwConfig field
    ("[sweep]\nbatch = 2", "batch"),                                  # not a list
    ("[sweep]\nbatch = []", "batch"),                                 # empty
    ("[sweep]\nbus_bytes = [8, \"16\"]", "bus_bytes"),                # wrong type
    ("[sweep]\nalu_mul = [1]", "alu_mul"),
    ("[[point]]\nclock_mhz = \"fast\"", "clock_mhz"),
    ("[sweep]\npreset = [\"pynq\", \"1x8\"]", "preset"),
    ("[base]\npreset = \"pynk\"", "preset"),                          # unknown preset
    ("[base]\nbatch = 3", "batch"),                                   # the base must be valid
    ("[options]\nnetwrk = \"resnet18\"", "netwrk"),
    ("[options]\nparts = [\"xc7z999\"]", "parts"),
    ("[options]\nimages = 0", "images"),
    ("[options]\nsynth = \"yes\"", "synth"),
])
def test_bad_space_is_one_line_naming_the_field(text, field):
    with pytest.raises(ConfigError) as info:
        parse_space(text, source="space.toml")
    message = str(info.value)
    assert "\n" not in message
    if field is None:
        assert "not valid TOML" in message
    else:
        assert repr(field) in message or field in message
        assert info.value.field in (field, None)


# ------------------------------------------------------------------ netlists and the front
def test_configs_differing_outside_the_rtl_share_a_netlist():
    pynq = PRESETS["pynq"]
    assert netlist_config(pynq.replace(clock_mhz=250.0, mem_latency=40)) == pynq
    assert netlist_config(pynq.replace(bus_bytes=16)) == PRESETS["ultra96"]   # same RTL, cached under its name
    half_wgt = pynq.replace(wgt_buff_bytes=1 << 17, clock_mhz=200.0)
    assert netlist_config(half_wgt) == half_wgt.replace(clock_mhz=100.0)
    with pytest.raises(RtlError, match="256-bit"):
        netlist_config(pynq.replace(bus_bytes=32, mem_burst_beats=128))


def test_pareto_front_keeps_nondominated_and_ties():
    recs = [dict(index=i, status="ok", latency_ms=ms, lut=lut) for i, (ms, lut) in
            enumerate([(10, 100), (5, 200), (5, 200), (12, 100), (4, 400), (6, 300)])]
    recs.append(dict(index=9, status="failed", latency_ms=1, lut=1))
    assert pareto_front(recs, ("latency_ms", "lut")) == [0, 1, 2, 4]


# ------------------------------------------------------------------ explore on executors
def _run(ex, out_dir=None, **kw):
    space = parse_space(SMALL_SPACE)
    return explore("digits_cnn", space.points, ex, out_dir, synth=False, **kw)


def test_local_pool_and_dask_give_the_records_of_the_inline_run(tmp_path):
    from distributed import LocalCluster

    with executor(workers=0) as ex:
        inline = _run(ex)
    with executor(workers=2) as ex:
        pool = _run(ex)
    with (LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
          executor(dask=cluster.scheduler_address) as ex):
        dask = _run(ex)
    assert pool.records == inline.records
    assert dask.records == inline.records
    by_name = {r["point"]: r for r in inline.records}
    assert [r["index"] for r in inline.records] == list(range(6))
    assert by_name["clock_mhz=100"]["cycles"] == by_name["clock_mhz=200"]["cycles"] > 0
    assert by_name["clock_mhz=200"]["latency_ms"] == pytest.approx(by_name["clock_mhz=100"]["latency_ms"] / 2)
    assert by_name["clock_mhz=200"]["pareto"] and not by_name["clock_mhz=100"]["pareto"]
    assert 0.9 < by_name["1x8"]["cosine"] <= 1.0                           # int8 on the cycle model vs float
    assert by_name["1x8"]["config"] == "1x8_i8w8a32_14_13_16_15" and by_name["1x8"]["status"] == "ok"
    failed = {r["point"]: (r["failed_stage"], r["reason"]) for r in inline.records if r["status"] != "ok"}
    assert failed["no room for weights"][0] == "compile" and "no tiling" in failed["no room for weights"][1]
    assert failed["block=12"][0] == "config" and "power of two" in failed["block=12"][1]
    assert "256-bit port" not in failed      # without synthesis a 256-bit port is only a faster memory


def test_job_log_lets_a_rerun_skip_finished_jobs(tmp_path):
    with executor(workers=0) as ex:
        first = _run(ex, tmp_path)
        log = tmp_path / JOB_LOG
        lines = log.read_text().splitlines()
        assert len(lines) == 5 and all(json.loads(ln)["key"].startswith("measure|") for ln in lines)
        log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])   # a run killed mid-line
        again = _run(ex, tmp_path)
    assert again.reused_jobs == 4
    assert again.records == first.records


def test_tuning_log_for_another_configuration_leaves_default_schedules(tmp_path):
    from vtakit.errors import VtaError

    log = tmp_path / "tune.jsonl"
    log.write_text(json.dumps({"workload": "conv2d:1x1x8x8:16x1x3x3:s1p1:none", "config": "0" * 16,
                               "schedule": {}, "cycles": 1, "error": None}) + "\n")
    with executor(workers=0) as ex:
        default = _run(ex)
        tuned = _run(ex, tuning_logs=[log])
        with pytest.raises(VtaError, match="does not exist"):
            _run(ex, tuning_logs=[tmp_path / "missing.jsonl"])
    assert [r["tuned_layers"] for r in tuned.records if r["status"] == "ok"] == [0, 0, 0, 0]
    assert tuned.records == default.records


def _fake_yosys(cfg, part, out, timeout_s):
    """Stands in for the minutes-long Yosys run; hw.synth still hashes, caches and counts as it does for real."""
    macs = cfg.peak_macs_per_cycle
    brams = (cfg.inp_buff_bytes + cfg.wgt_buff_bytes + cfg.acc_buff_bytes + cfg.uop_buff_bytes) // 4608
    cells = {"LUT6": 80 * macs, "LUT4": 10 * cfg.bus_bytes, "FDRE": 30 * macs, "RAMB36E1": brams,
             "RAMB18E1": 1, "DSP48E1": macs // 2 + 6}
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "netlist.json.gz", "wt") as f:
        json.dump(fake_netlist(5 if macs > 64 else 2), f)
    (out / "cells.json").write_text(json.dumps({"cells": cells, "seconds": 0.0}))
    _fake_yosys.runs.append(cfg.label)


def test_synthesis_is_shared_per_netlist_and_outputs_list_failures(tmp_path, monkeypatch):
    from vtakit.hw import synth

    monkeypatch.setenv("VTAKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(synth, "_run_yosys", _fake_yosys)
    _fake_yosys.runs = []
    space = parse_space(SMALL_SPACE)
    with executor(workers=0) as ex:
        result = explore("digits_cnn", space.points, ex, tmp_path / "out", parts=space.options.parts)
    assert sorted(_fake_yosys.runs) == ["1x16_i8w8a32_15_15_9_17", "1x8_i8w8a32_14_13_16_15", "pynq"]
    recs = {r["point"]: r for r in result.records}
    slow, fast, small = recs["clock_mhz=100"], recs["clock_mhz=200"], recs["1x8"]
    assert slow["netlist"] == fast["netlist"] == "pynq" and slow["lut"] == fast["lut"] == 80 * 256 + 80
    assert fast["dsp"] == 134 and fast["bram36"] == (32 + 256 + 128 + 32) * 1024 // 4608 + 0.5
    assert fast["fits_xc7z010"] == "over: lut bram36 dsp" and fast["fits_xc7z020"] == "yes"
    assert fast["smallest_part"] == "xc7z020" and small["smallest_part"] == "xc7z010"
    assert [r["point"] for r in result.records if r["pareto"]] == ["clock_mhz=200", "1x8"]
    # timing: the pynq netlist reaches 153.5 MHz, so the 200 MHz point is marked and its latency taken there
    assert slow["fmax_mhz"] == fast["fmax_mhz"] == 153.5 and slow["clock_ok"] and not fast["clock_ok"]
    assert fast["clock_mhz"] == 200 and fast["achievable_mhz"] == 153.5
    assert fast["latency_ms_achievable"] == pytest.approx(fast["latency_ms"] * 200 / 153.5, rel=1e-3)
    assert slow["latency_ms_achievable"] == slow["latency_ms"] and small["clock_ok"]
    assert fast["critical_path"] == "FDRE src_reg -> FDRE.D dst_reg"
    port = recs["256-bit port"]
    assert port["status"] == "failed" and port["failed_stage"] == "synth" and "256-bit" in port["reason"]
    assert port["latency_ms"] > 0                        # measured all the same
    weights = recs["no room for weights"]
    assert weights["failed_stage"] == "compile" and weights["lut"] is not None

    files = write_outputs(result, tmp_path / "out", space="small.toml")
    with files["csv"].open() as f:
        rows = list(csv.DictReader(f))
    assert [r["point"] for r in rows] == [p.name for p in space.points]
    assert "do not fit this configuration" in rows[3]["reason"] and "no tiling" in rows[3]["reason"]
    assert rows[4]["failed_stage"] == "config"
    assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = files["summary"].read_text()
    assert "## Pareto set" in summary and "#1 clock_mhz=200" in summary
    assert "- #5 256-bit port: synth: the RTL implements 64- and 128-bit memory buses" in summary
    assert "- xc7z010: #2 1x8" in summary
    assert "| 154 (< 200: at 154) |" in summary and rows[1]["clock_mhz"] == "200"


# ------------------------------------------------------------------ the command line
def test_cli_explore_writes_outputs_and_reports_bad_input(tmp_path, capsys):
    from vtakit.cli import main

    space = tmp_path / "space.toml"
    space.write_text(SMALL_SPACE)
    out = tmp_path / "out"
    assert main(["explore", "--space", str(space), "--no-synth", "--workers", "0", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Pareto set: #1;" in text and "2 failed" in text
    assert {p.name for p in out.iterdir()} == {"explore.csv", "summary.md", JOB_LOG}
    space.write_text("[sweep]\nblock_inn = [16]\n")
    assert main(["explore", "--space", str(space), "--network", "digits_cnn", "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "block_inn" in err and "\n" not in err
    space.write_text(SMALL_SPACE)
    assert main(["explore", "--space", str(space), "--network", "lenet", "-o", str(out)]) == 1
    assert "unknown network 'lenet'" in capsys.readouterr().err


@pytest.mark.slow
def test_real_yosys_sweep_of_two_clocks_synthesizes_once(tmp_path):
    """One real Yosys run (1x8, about a minute) shared by two clocks."""
    space = parse_space("""
[base]
preset = "1x8"
[sweep]
clock_mhz = [100, 150]
[options]
parts = ["xc7z020"]
""")
    with executor(workers=2) as ex:
        result = explore("digits_cnn", space.points, ex, tmp_path, parts=space.options.parts)
    a, b = result.records
    assert a["status"] == b["status"] == "ok" and a["lut"] == b["lut"] > 1000 and a["dsp"] == b["dsp"] > 0
    assert a["fits_xc7z020"] == "yes" and a["fmax_mhz"] == b["fmax_mhz"] > 0 and a["critical_path"]
    # the front ranks latency at min(asked clock, estimated fmax): above the fmax the clocks tie
    assert b["pareto"] and a["pareto"] == (a["achievable_mhz"] == b["achievable_mhz"])
    assert b["clock_ok"] == (150 <= b["fmax_mhz"])


def test_a_program_budget_is_a_result_and_the_wall_clock_is_not():
    """A budget derived from the program fails the same way every time (kept in jobs.jsonl); a wall-clock
    timeout may pass on an idle machine (run again next time)."""
    from vtakit.errors import BudgetExceeded, DeviceTimeout
    from vtakit.scheduling.explore import _failure

    assert _failure("latency", BudgetExceeded("program budget spent"))["failed"]["deterministic"] is True
    assert _failure("latency", DeviceTimeout("took 600 s"))["failed"]["deterministic"] is False
