"""Timeouts in tuning: a run stopped by the wall clock (transient: a loaded machine) is never logged as
a result and a rerun measures it again; a refusal by the program's own work budget (BudgetExceeded,
the same on every machine) is logged like any other failure of its schedule."""

from __future__ import annotations

import json

import pytest

from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import BudgetExceeded, DeviceTimeout
from vtakit.isa.config import HwConfig
from vtakit.scheduling import measure
from vtakit.scheduling.executor import executor
from vtakit.scheduling.log import TuningLog, read_log
from vtakit.scheduling.measure import measure_conv
from vtakit.scheduling.task import ConvTask
from vtakit.scheduling.tune import tune_task
from vtakit.sim import budget, cycle

TINY = ConvTask("tiny", HwConfig.preset("pynq"), 1, 32, 8, 8, 32, 3, 1, 1)
KNOBS = ConvKnobs(tile_oc=2, tile_oh=4, tile_ow=8, tile_ic=1, vthreads=2).to_dict()


def test_the_work_budget_is_a_result_and_the_wall_clock_is_not(monkeypatch):
    monkeypatch.setattr(budget, "MAX_WORK", 100)
    refused = measure_conv(TINY, KNOBS, timeout_s=None)       # no time limit: the program's budget applies
    assert refused.error.startswith("BudgetExceeded:") and "beyond the 100" in refused.error
    assert not refused.transient
    monkeypatch.setattr(cycle, "_TIMEOUT_CHECK_EVENTS", 1)
    late = measure_conv(TINY, KNOBS, timeout_s=1e-9)
    assert late.error.startswith("DeviceTimeout:") and "exceeded" in late.error and late.transient
    assert issubclass(BudgetExceeded, DeviceTimeout)          # callers catching DeviceTimeout still do


class _Scripted:
    """ops.conv2d that raises the scripted error on the given calls (1-based) and runs the others."""

    def __init__(self, real, errors: dict[int, Exception]):
        self.real, self.errors, self.calls = real, errors, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls in self.errors:
            raise self.errors[self.calls]
        return self.real(*args, **kwargs)


def test_wall_clock_timeouts_are_left_out_and_measured_by_a_rerun(tmp_path, monkeypatch):
    log_path = tmp_path / "t.jsonl"
    scripted = _Scripted(measure.ops.conv2d, {1: DeviceTimeout("cycle simulation exceeded 120 s"),
                                              3: BudgetExceeded("sim: beyond the budget"),
                                              5: DeviceTimeout("cycle simulation exceeded 120 s")})
    monkeypatch.setattr(measure.ops, "conv2d", scripted)
    with executor(workers=0) as ex:
        first = tune_task(TINY, executor=ex, tuner="random", trials=6, log=TuningLog(log_path), batch=3)
    logged = read_log(log_path)
    assert scripted.calls == 6 and first.timed_out == 2 and first.measured_now == 4 and first.trials == 4
    assert len(logged) == 4 and not any(str(r["error"]).startswith("DeviceTimeout") for r in logged)
    assert [r["error"].split(":")[0] for r in logged if r["error"]] == ["BudgetExceeded"]
    assert all(r["tuner"] != "default" for r in logged)       # call 1, the default schedule, timed out
    budget_schedule = next(r["schedule"] for r in logged if r["error"])

    monkeypatch.setattr(measure.ops, "conv2d", scripted.real)
    with executor(workers=0) as ex:
        second = tune_task(TINY, executor=ex, tuner="random", trials=6, log=TuningLog(log_path), batch=3)
    logged = read_log(log_path)
    assert second.timed_out == 0 and second.measured_now == 2 and second.trials == 6 and len(logged) == 6
    assert [r["tuner"] for r in logged].count("default") == 1 and second.default_cycles
    assert len({json.dumps(r["schedule"], sort_keys=True) for r in logged}) == 6   # the refusal not re-measured
    assert [r["schedule"] for r in logged if r["error"]] == [budget_schedule]
    trials = [r["trial"] for r in logged]
    assert len(set(trials)) == 6 and min(trials[4:]) > max(trials[:4])           # numbers never repeat


def test_timeouts_an_older_version_logged_are_measured_again(tmp_path):
    log_path = tmp_path / "t.jsonl"
    with executor(workers=0) as ex:
        tune_task(TINY, executor=ex, tuner="random", trials=3, log=TuningLog(log_path), batch=3)
    records = read_log(log_path)
    old = {**records[0], "cycles": None, "error": "DeviceTimeout: cycle simulation exceeded 120 s"}
    log_path.write_text("".join(json.dumps(r) + "\n" for r in [old, *records[1:]]))
    with executor(workers=0) as ex:
        again = tune_task(TINY, executor=ex, tuner="random", trials=3, log=TuningLog(log_path), batch=3)
    logged = read_log(log_path)
    assert again.measured_now == 1 and again.trials == 3 and len(logged) == 4
    assert logged[-1]["schedule"] == old["schedule"] and logged[-1]["cycles"] == records[0]["cycles"]
    assert logged[-1]["trial"] == 1 + max(r["trial"] for r in records)


@pytest.mark.parametrize("error, kept", [(BudgetExceeded("over budget"), True),
                                         (DeviceTimeout("exceeded 120 s"), False)])
def test_measure_result_says_which(monkeypatch, error, kept):
    def boom(*a, **k):
        raise error

    monkeypatch.setattr(measure.ops, "conv2d", boom)
    result = measure_conv(TINY, KNOBS)
    assert result.cycles is None and result.transient is not kept
    assert result.error == f"{type(error).__name__}: {error}"
