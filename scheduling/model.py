"""The learned cost model: XGBoost ranking schedules by measured speed.

Like AutoTVM's, the model only has to order candidates, not predict cycles, so
it is trained with a pairwise ranking objective on normalised throughput
(best cycles of the task / cycles; failed points 0), one query group per task.
Records of earlier tasks stay in the training set: they seed a new task's
search before it has measured anything (transfer), and keep helping after.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xgboost as xgb

from vtakit.errors import VtaError

PARAMS = {
    "objective": "rank:pairwise",
    "eta": 0.3,
    "max_depth": 6,
    "min_child_weight": 1,
    "gamma": 0.0001,
    "subsample": 1.0,
    "tree_method": "hist",
    "nthread": 1,
    "verbosity": 0,
}
ROUNDS = 60


def throughput_labels(cycles: list[int | None]) -> np.ndarray:
    """best / cycles per point (1.0 for the best), 0 for failures."""
    ok = [c for c in cycles if c]
    best = min(ok) if ok else 1
    return np.array([best / c if c else 0.0 for c in cycles], dtype=np.float32)


@dataclass
class TrainingSet:
    """Feature rows and labels grouped by task: the current task's and earlier ones'."""

    groups: dict[str, tuple[list[np.ndarray], list[int | None]]] = field(default_factory=dict)

    def add(self, task_key: str, features: np.ndarray, cycles: int | None) -> None:
        rows, results = self.groups.setdefault(task_key, ([], []))
        rows.append(features)
        results.append(cycles)

    def count(self, task_key: str | None = None) -> int:
        if task_key is not None:
            return len(self.groups.get(task_key, ([], []))[1])
        return sum(len(r) for _, r in self.groups.values())

    def matrices(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        xs, ys, sizes = [], [], []
        for rows, results in self.groups.values():
            if len(rows) < 2 or not any(results):
                continue                   # a group needs two points and one success to rank anything
            xs.append(np.stack(rows))
            ys.append(throughput_labels(results))
            sizes.append(len(rows))
        if not xs:
            return np.empty((0, 0), np.float32), np.empty(0, np.float32), []
        return np.concatenate(xs), np.concatenate(ys), sizes


class XGBCostModel:
    """Fit on a TrainingSet, score feature rows (higher = faster)."""

    def __init__(self, seed: int = 0, rounds: int = ROUNDS):
        self.seed = seed
        self.rounds = rounds
        self.booster = None

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def fit(self, data: TrainingSet) -> bool:
        """Retrain from scratch; False (and untrained) while there is nothing to rank."""
        x, y, sizes = data.matrices()
        if not sizes:
            self.booster = None
            return False
        dtrain = xgb.DMatrix(x, label=y)
        dtrain.set_group(sizes)
        self.booster = xgb.train({**PARAMS, "seed": self.seed}, dtrain, num_boost_round=self.rounds)
        return True

    def predict(self, features: np.ndarray) -> np.ndarray:
        if self.booster is None:
            raise VtaError("the cost model predicts only after fit")
        return self.booster.predict(xgb.DMatrix(features))
