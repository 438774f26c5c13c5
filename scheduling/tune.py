"""The tuning loop: propose a batch, measure it on the executor, log each result as it lands.

Resuming is reading the log: the task's records become the tuner's history
(and the cost model's training data), their schedules are never measured
again, and the loop runs until the task has `trials` records.  The tuner only
learns once a whole batch is in, in proposal order, so a local pool and a Dask
cluster make the same decisions.

Only outcomes of the schedule itself are logged: cycles, or a failure every
rerun repeats (a wrong result, a compile error, the program's work budget).  A
measurement stopped by its wall-clock time limit (a loaded machine) is left out
of the log and of what the tuner learns, so a rerun measures it again; records
of such timeouts written by older versions are read the same way.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable

from vtakit.compiler.backends.vta.heuristics import default_conv_knobs
from vtakit.errors import DeviceTimeout, VtaError
from vtakit.scheduling.executor import RETRIES, run_jobs
from vtakit.scheduling.log import TuningLog
from vtakit.scheduling.measure import MeasureResult, Measurer
from vtakit.scheduling.model import TrainingSet
from vtakit.scheduling.schedule_space import ConvSpace
from vtakit.scheduling.task import ConvTask
from vtakit.scheduling.tuners import make_tuner

Progress = Callable[[ConvTask, int, int, "int | None"], None]
"""progress(task, trials done, trials wanted, best cycles so far)"""


@dataclass(frozen=True)
class TuneResult:
    task: ConvTask
    trials: int                  # records of this task in the log (this run's and earlier ones')
    measured_now: int            # of which this run measured
    best_cycles: int | None
    best_schedule: dict | None
    default_cycles: int | None   # the default heuristic's schedule, when it was measured
    timed_out: int = 0           # measurements of this run stopped by the wall clock: not logged


def _record(task: ConvTask, schedule: dict, result: MeasureResult, trial: int, tuner: str, device: str) -> dict:
    return {"workload": task.key, "task": task.name, "config": task.cfg.fingerprint(),
            "config_label": task.cfg.label, "schedule": schedule, "cycles": result.cycles,
            "error": result.error, "trial": trial, "tuner": tuner, "device": device,
            "compile_s": round(result.compile_s, 3), "run_s": round(result.run_s, 3)}


def tune_task(task: ConvTask, *, executor: Executor, tuner: str = "xgb", trials: int = 200,
              measurer: Measurer | None = None, log: TuningLog | None = None,
              training: TrainingSet | None = None, seed: int = 0, batch: int = 8,
              measure_default: bool = True, space: ConvSpace | None = None,
              progress: Progress | None = None, retries: int = RETRIES) -> TuneResult:
    """Tune one task to `trials` measurements (counting those already in the log). A measurement whose
    worker was lost runs again (`retries` times, then VtaError); it is never logged as a result.  One
    stopped by the wall clock counts against this run's budget but is not logged (`timed_out`): the
    log then holds fewer than `trials` records, and a rerun measures the rest."""
    if trials < 1:
        raise VtaError(f"trials must be >= 1, got {trials}")
    measurer = measurer or Measurer()
    space = space or ConvSpace(task)
    search = make_tuner(tuner, space, seed, training)
    logged = log.for_task(task.key, task.cfg) if log else []
    records = sorted((r for r in logged if not _timed_out(r)), key=lambda r: r.get("trial", 0))
    known = [(space.from_dict(r["schedule"]), r["cycles"]) for r in records
             if space.point_of(r["schedule"]) is not None]
    if known:
        search.update([i for i, _ in known], [c for _, c in known])
    default = default_conv_knobs(task.cfg, task.shape).to_dict()
    pending: list[tuple[dict, str]] = []
    if measure_default and all(_schedule_id(r["schedule"]) != _schedule_id(default) for r in records):
        pending.append((default, "default"))
    done = len(records)
    # A kill mid-batch leaves gaps (trials 8, 10, 13 of 8..15 landed): number on after the highest.
    next_trial = 1 + max((r["trial"] for r in logged if isinstance(r.get("trial"), int)), default=-1)
    measured_now = timed_out = 0
    exclude = {i for i, _ in known}

    def best() -> int | None:
        ok = [r["cycles"] for r in records if r["cycles"]]
        return min(ok) if ok else None

    if progress:
        progress(task, done, trials, best())
    while done < trials:
        if not pending:
            picks = search.next_batch(min(batch, trials - done), exclude)
            if not picks:
                break                                  # the space is exhausted
            pending = [(space.to_dict(i), tuner) for i in picks]
        pending = pending[: trials - done]
        by_trial = {next_trial + k: (sched, who) for k, (sched, who) in enumerate(pending)}
        calls = {t: (lambda ex, sched=sched: measurer.submit(ex, task, sched)) for t, (sched, _) in by_trial.items()}
        landed: dict[int, MeasureResult] = {}
        for trial, fut in run_jobs(executor, calls, retries=retries, describe=lambda t: f"trial {t} of {task.name}"):
            sched, who = by_trial[trial]
            result = _result(fut)
            landed[trial] = result
            if result.transient:
                timed_out += 1
                continue
            rec = _record(task, sched, result, trial, who, measurer.device)
            if log:
                log.append(rec)
            records.append(rec)
            measured_now += 1
            if progress:
                progress(task, len(records), trials, best())
        ordered = sorted(by_trial.items())
        indices = [space.point_of(sched) for _, (sched, _) in ordered]
        inside = [(space.index(p), landed[t]) for (t, _), p in zip(ordered, indices) if p is not None]
        learned = [(i, r.cycles) for i, r in inside if not r.transient]
        search.update([i for i, _ in learned], [c for _, c in learned])
        exclude |= {i for i, _ in inside}        # a timed-out one too: not proposed again in this run
        done += len(ordered)
        next_trial += len(ordered)
        pending = []
    default_rec = next((r for r in records if _schedule_id(r["schedule"]) == _schedule_id(default)), None)
    ok = [r for r in records if r["cycles"]]
    top = min(ok, key=lambda r: r["cycles"]) if ok else None
    return TuneResult(task, len(records), measured_now, top["cycles"] if top else None,
                      top["schedule"] if top else None, default_rec["cycles"] if default_rec else None,
                      timed_out)


def _timed_out(record: dict) -> bool:
    """A record of a wall-clock timeout (older versions logged them): not a result of its schedule."""
    error = record.get("error")
    return isinstance(error, str) and error.startswith(f"{DeviceTimeout.__name__}:")


def _schedule_id(schedule: dict) -> tuple:
    return tuple(sorted(schedule.items()))


def _result(future) -> MeasureResult:
    """The job's result; a job that raised (a bug: measure_conv returns its failures) is a failure record.
    Lost workers never get here: run_jobs runs their jobs again."""
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - a remote bug must not lose the run's other results
        return MeasureResult(None, f"WorkerError: {type(e).__name__}: {e}", 0.0, 0.0)
