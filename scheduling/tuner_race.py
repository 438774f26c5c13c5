"""`vtakit bench tuner`: how many trials the XGBoost tuner and random search need to get close to the best.

For each layer and seed, both tuners run `trials` measurements; the target is
95 % of the best throughput either tuner found on that layer (over all seeds),
and a run's figure is the trial at which its best-so-far first reaches it.
The XGBoost tuner of each seed carries its model's training data from layer to
layer (transfer), as `vtakit tune` does.  Cycles are deterministic, so every
distinct schedule is measured once and shared between tuners and seeds.
"""

from __future__ import annotations

import statistics
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Callable

from vtakit.scheduling.measure import Measurer
from vtakit.scheduling.model import TrainingSet
from vtakit.scheduling.schedule_space import ConvSpace
from vtakit.scheduling.task import ConvTask
from vtakit.scheduling.tune import tune_task

TARGET = 0.95


@dataclass(frozen=True)
class MemoMeasurer(Measurer):
    """A Measurer that measures each (task, schedule) once and answers repeats from memory."""

    memo: dict = field(default_factory=dict, compare=False, hash=False)

    def submit(self, executor: Executor, task: ConvTask, knobs: dict) -> Future:
        key = (task.key, task.cfg.fingerprint(), tuple(sorted(knobs.items())))
        held = self.memo.get(key)
        if held is None or (held.done() and (held.cancelled() or held.exception() is not None)):
            self.memo[key] = super().submit(executor, task, knobs)   # a lost worker's failure is not an answer
        return _Copy(self.memo[key])


class _Copy(Future):
    """A Future tracking another: as_completed needs a distinct object per submission."""

    def __init__(self, source: Future):
        super().__init__()
        source.add_done_callback(self._copy)

    def _copy(self, source: Future) -> None:
        if source.cancelled():
            self.cancel()
            self.set_running_or_notify_cancel()      # what wait() and as_completed() watch for
        elif source.exception() is not None:
            self.set_exception(source.exception())
        else:
            self.set_result(source.result())


class _Recorder:
    """A stand-in TuningLog that keeps one run's records in memory."""

    def __init__(self):
        self.records: list[dict] = []

    def for_task(self, workload, cfg) -> list[dict]:
        return []

    def append(self, record: dict) -> None:
        self.records.append(record)


def trials_to_reach(records: list[dict], target_cycles: float) -> int | None:
    """1-based trial at which the best so far is within the target, None if never."""
    for rec in sorted(records, key=lambda r: r["trial"]):
        if rec["cycles"] and rec["cycles"] <= target_cycles:
            return rec["trial"] + 1
    return None


def race(tasks: list[ConvTask], *, executor: Executor, trials: int = 100, seeds: int = 3, batch: int = 8,
         measurer: Measurer | None = None,
         progress: Callable[[str], None] | None = None) -> list[dict]:
    """One row per task: name, xgb_trials, random_trials (medians over seeds; None if a median
    run never got there), best_cycles, and the per-seed figures."""
    memo = MemoMeasurer(**{k: getattr(measurer or Measurer(), k) for k in ("device", "check", "timeout_s")})
    spaces = {t.key: ConvSpace(t) for t in tasks}
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for seed in range(seeds):
        training = TrainingSet()
        for task in tasks:
            for tuner in ("xgb", "random"):
                if progress:
                    progress(f"{task.name}: {tuner}, seed {seed}")
                rec = _Recorder()
                tune_task(task, executor=executor, tuner=tuner, trials=trials, measurer=memo, log=rec,
                          training=training if tuner == "xgb" else None, seed=seed, batch=batch,
                          measure_default=False, space=spaces[task.key])
                runs[(task.name, tuner, seed)] = rec.records
    rows = []
    for task in tasks:
        found = [r["cycles"] for s in range(seeds) for t in ("xgb", "random")
                 for r in runs[(task.name, t, s)] if r["cycles"]]
        best = min(found) if found else None
        row: dict = {"name": task.name, "best_cycles": best}
        for tuner in ("xgb", "random"):
            per_seed = [trials_to_reach(runs[(task.name, tuner, s)], best / TARGET) if best else None
                        for s in range(seeds)]
            row[f"{tuner}_per_seed"] = per_seed
            row[f"{tuner}_trials"] = _median(per_seed, trials)
        rows.append(row)
    return rows


def _median(values: list[int | None], trials: int) -> float | None:
    """Median with runs that never reached counted as trials + 1; None if the median itself is one."""
    counted = [v if v is not None else trials + 1 for v in values]
    m = statistics.median(counted)
    return None if m > trials else m


def ratio_summary(rows: list[dict], trials: int) -> dict:
    """Per-layer xgb/random ratios (unreached counted as trials + 1) and their median."""
    ratios = []
    for r in rows:
        x = r["xgb_trials"] if r["xgb_trials"] is not None else trials + 1
        y = r["random_trials"] if r["random_trials"] is not None else trials + 1
        ratios.append(x / y)
    return {"ratios": ratios, "median_ratio": statistics.median(ratios) if ratios else None}

