"""Tuning logs as untrusted input (issue 37, cause 11): torn and unterminated last lines, forged and
malformed records, records of another configuration, bad schedules at compile time, trial numbers."""

import json
import re
import warnings

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import VtaError
from vtakit.isa.config import HwConfig
from vtakit.scheduling.executor import executor
from vtakit.scheduling.log import TuningLog, TuningLogWarning, apply_best, read_log
from vtakit.scheduling.log_records import parse_workload, record_problem, usable_problem
from vtakit.scheduling.measure import task_data
from vtakit.scheduling.schedule_space import ConvSpace
from vtakit.scheduling.task import ConvTask
from vtakit.scheduling.tune import tune_task

PYNQ = HwConfig.preset("pynq")
TINY = ConvTask("tiny", PYNQ, 1, 32, 8, 8, 32, 3, 1, 1)          # peak: 2,304 cycles on pynq
GOOD = ConvKnobs(tile_oc=2, tile_oh=8, tile_ow=8, tile_ic=2, vthreads=1).to_dict()


def _rec(cycles=5000, schedule=None, **extra) -> dict:
    return {"workload": TINY.key, "config": PYNQ.fingerprint(), "schedule": schedule or GOOD, "cycles": cycles,
            "error": None if cycles is not None else "CompileError: x", **extra}


def _line(rec) -> bytes:
    return json.dumps(rec).encode() + b"\n"


def _skip_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, TuningLogWarning)]


def test_complete_last_record_without_newline_is_kept(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_line(_rec(5000, trial=0)) + _line(_rec(6000, trial=1))[:-1])   # no final newline
    log = TuningLog(path)
    assert [r["cycles"] for r in log.records] == [5000, 6000]
    assert path.read_bytes().endswith(b"}\n")                   # repaired, not cut
    log.append(_rec(7000, trial=2))
    assert [r["cycles"] for r in read_log(path)] == [5000, 6000, 7000]


def test_torn_last_line_is_dropped_and_the_file_repaired(tmp_path):
    path = tmp_path / "t.jsonl"
    torn = _line(_rec(6000, task="é" * 4))[:-12]                # cut inside the record (and a UTF-8 char)
    path.write_bytes(_line(_rec(5000)) + torn)
    log = TuningLog(path)
    assert len(log.records) == 1
    log.append(_rec(7000))
    assert [r["cycles"] for r in read_log(path)] == [5000, 7000]


FORGED = [
    (_rec(-9_031_680), "cycles must be a positive integer"),
    (_rec(0), "cycles must be a positive integer"),
    (_rec(True), "cycles must be a positive integer"),
    (_rec(12.5), "cycles must be a positive integer"),
    (_rec("5000"), "cycles must be a positive integer"),
    (_rec(1 << 70), "cycles must be a positive integer"),
    ({**_rec(5000), "error": "boom"}, "either cycles or an error"),
    ({**_rec(None), "error": None}, "either cycles or an error"),
    ({**_rec(5000), "error": 3}, "error must be a string"),
    ({**_rec(5000), "workload": 7}, "workload must be a non-empty string"),
    ({**_rec(5000), "schedule": [1, 2]}, "schedule must be an object"),
    ({**_rec(5000), "schedule": {**GOOD, "tile_oc": [2]}}, "schedule knob 'tile_oc'"),
    ({**_rec(5000), "trial": -1}, "trial must be a finite non-negative number"),
    ({**_rec(5000), "compile_s": "fast"}, "compile_s has the wrong type"),
    ({k: v for k, v in _rec(5000).items() if k != "config"}, "'config' is missing"),
    ([1, 2, 3], "not a tuning record"),
]


@pytest.mark.parametrize("rec, message", FORGED)
def test_malformed_records_are_refused_by_name(tmp_path, rec, message):
    assert message in record_problem(rec)
    path = tmp_path / "t.jsonl"
    path.write_bytes(_line(_rec(5000)) + _line(rec) + _line(_rec(6000)))
    with pytest.raises(VtaError, match=f"t.jsonl:2: .*{message}"):
        read_log(path)


def test_invalid_lines_are_skipped_with_one_warning(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_line(_rec(5000)) + b'{"workload": "\xff\xfe"}\n' + b"not json\n" + b'{"cycles": NaN}\n'
                     + _line(_rec(-5)) + _line(_rec(6000)))
    with pytest.raises(VtaError, match=r"t.jsonl:2: not UTF-8 text \(byte 0xff"):
        read_log(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = TuningLog(path)
    assert [r["cycles"] for r in log.records] == [5000, 6000]
    assert _skip_warnings(caught) == [f"{path}: skipped 4 invalid records (first at line 2: not UTF-8 text "
                                      "(byte 0xff at column 15))"]


def test_forged_cycles_never_reach_the_tuner_result(tmp_path):
    """Negative cycles made `vtakit tune` report "-9,031,680 %" utilization; fewer cycles than the peak
    allows (2,304 here) are as impossible."""
    path = tmp_path / "t.jsonl"
    other = ConvKnobs(tile_oc=1, tile_oh=8, tile_ow=8, tile_ic=2, vthreads=1).to_dict()
    path.write_bytes(_line(_rec(5000, trial=0)) + _line(_rec(-9_031_680, other, trial=1))
                     + _line(_rec(100, other, trial=2)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with executor(workers=0) as ex:
            res = tune_task(TINY, executor=ex, tuner="random", trials=1, log=TuningLog(path), measure_default=False)
    assert res.best_cycles == 5000 and res.measured_now == 0 and res.trials == 1
    messages = _skip_warnings(caught)
    assert any("skipped 1 invalid record (first at line 2: cycles must be a positive integer" in m
               for m in messages)
    assert any("line 3: 100 cycles is faster than the peak of config pynq allows (2,304 cycles" in m
               for m in messages)


def test_records_of_another_configuration_are_not_used(tmp_path):
    log = TuningLog(tmp_path / "t.jsonl")
    eight = HwConfig.preset("1x8")
    log.append({**_rec(5000), "config": eight.fingerprint()})
    log.append({k: v for k, v in _rec(6000).items() if k != "config"}, cfg=PYNQ)   # fingerprint filled in
    assert [r["cycles"] for r in log.for_task(TINY.key, PYNQ)] == [6000]
    assert read_log(log.path)[1]["config"] == PYNQ.fingerprint()
    with pytest.raises(VtaError, match="'config' is missing"):
        log.append({k: v for k, v in _rec(6000).items() if k != "config"})
    with pytest.raises(VtaError, match="compile_s must be a finite non-negative number, got nan"):
        log.append(_rec(6000, compile_s=float("nan")))
    with pytest.raises(VtaError, match="not plain JSON"):
        log.append(_rec(6000, note=float("inf")))


BAD_SCHEDULES = [
    {**GOOD, "tile_oc": 0},            # ZeroDivisionError in the compiler before
    {**GOOD, "tile_oc": "2"},          # TypeError
    {**GOOD, "extra": 1},              # TypeError (unexpected keyword)
    {k: v for k, v in GOOD.items() if k != "order"},
    {**GOOD, "tile_oh": -1},
    {**GOOD, "tile_ow": 2.5},          # refused on reading already
    {**GOOD, "vthreads": 0},
    {**GOOD, "order": "zz"},
    {**GOOD, "hoist_weights": 1},
    {**GOOD, "tile_oc": 3},            # beyond the 2 output-channel blocks of the layer
]


@pytest.mark.parametrize("bad", BAD_SCHEDULES)
def test_bad_schedules_are_skipped_at_compile_time(tmp_path, bad):
    """`compile --tuning-log` crashed (ZeroDivisionError, TypeError) on such records; now the fastest usable
    record wins and the bad one is named in one warning."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(_line(_rec(3000, bad)) + _line(_rec(9000, GOOD)))
    assert usable_problem(_rec(3000, bad), PYNQ) is not None
    x, w, b, expect = task_data(TINY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with apply_best(path) as table:
            y, rep = ops.conv2d(x, w, padding=1, bias=b, shift=8, clip=(0, 127), config=PYNQ)
    assert rep.schedule == GOOD and np.array_equal(y, expect) and table.used == {TINY.key}
    (message,) = _skip_warnings(caught)
    assert re.search(r"skipped 1 invalid record \(first at (\S+t\.jsonl:|line )1: schedule knob", message)


def test_workload_keys_parse_to_the_task_they_name():
    wl = parse_workload(TINY.key)
    assert wl is not None and wl.macs == TINY.macs and wl.out_hw == TINY.out_hw
    for key in ("conv2d:1x32x8x8:32x16x3x3:s1p1:none", "conv2d:1x32x8x8:32x32x9x9:s1p0:none",
                "conv2d:1x32x8x8:32x32x3x3:s0p1:none", "dense:1x2", "conv2d:" + "9" * 100):
        assert parse_workload(key) is None


def test_trial_numbers_never_repeat_after_a_half_written_batch(tmp_path):
    """A kill in the middle of a batch of trials 0..3 left 0, 1 and 3 in the log; the resume numbered its
    trials from the record count (3, 4) and repeated 3."""
    space = ConvSpace(TINY)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(_line(_rec(5000 + i, space.to_dict(i), trial=t)) for i, t in enumerate((0, 1, 3))))
    with executor(workers=0) as ex:
        res = tune_task(TINY, executor=ex, tuner="random", trials=5, log=TuningLog(path), batch=2,
                        measure_default=False)
    trials = [r["trial"] for r in read_log(path)]
    assert res.measured_now == 2 and len(trials) == len(set(trials)) == 5
    assert trials[3:] in ([4, 5], [5, 4])
