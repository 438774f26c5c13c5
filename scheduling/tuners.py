"""Search strategies over a ConvSpace: random, grid, simulated annealing, and XGBoost-guided.

A tuner proposes batches of point indices (`next_batch`) and learns from their
measurements (`update`, called in proposal order so a run is reproducible
whatever order the workers finish in).  None of them ever proposes a point
already measured (the driver passes those as `exclude`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from vtakit.errors import VtaError
from vtakit.scheduling.model import TrainingSet, XGBCostModel
from vtakit.scheduling.schedule_space import ConvSpace

TUNERS = ("xgb", "random", "grid", "sa")


class Tuner(ABC):
    name = "base"

    def __init__(self, space: ConvSpace, seed: int = 0):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.results: dict[int, int | None] = {}

    @abstractmethod
    def next_batch(self, n: int, exclude: set[int]) -> list[int]:
        """Up to `n` point indices to measure next, none of them in `exclude`."""

    def update(self, indices: list[int], cycles: list[int | None]) -> None:
        self.results.update(zip(indices, cycles))


class RandomTuner(Tuner):
    """Uniform draws without replacement: the baseline."""

    name = "random"

    def next_batch(self, n: int, exclude: set[int]) -> list[int]:
        return self.space.sample(self.rng, n, exclude)


class GridTuner(Tuner):
    """The space in knob order, a point after the other."""

    name = "grid"

    def __init__(self, space: ConvSpace, seed: int = 0):
        super().__init__(space, seed)
        self._cursor = 0

    def next_batch(self, n: int, exclude: set[int]) -> list[int]:
        picks = []
        while len(picks) < n and self._cursor < len(self.space):
            if self._cursor not in exclude:
                picks.append(self._cursor)
            self._cursor += 1
        return picks


class AnnealingTuner(Tuner):
    """Simulated annealing on measurements: each chain proposes a neighbour, measures it, and moves
    there if it is faster, or slower with a probability that shrinks as the temperature falls."""

    name = "sa"

    def __init__(self, space: ConvSpace, seed: int = 0, temperature: float = 0.3, cooling: float = 0.97):
        super().__init__(space, seed)
        self.temperature, self.cooling = temperature, cooling
        self.chains: list[int] = []
        self._proposed_by: dict[int, int] = {}

    def next_batch(self, n: int, exclude: set[int]) -> list[int]:
        if not self.chains:
            self.chains = self.space.sample(self.rng, n, exclude)
            self._proposed_by = {i: c for c, i in enumerate(self.chains)}
            return list(self.chains)
        picks: list[int] = []
        self._proposed_by = {}
        for c, state in enumerate(self.chains[:n]):
            for _ in range(32):
                cand = self.space.mutate(state, self.rng)
                if cand not in exclude and cand not in picks:
                    picks.append(cand)
                    self._proposed_by[cand] = c
                    break
        return picks

    def update(self, indices: list[int], cycles: list[int | None]) -> None:
        super().update(indices, cycles)
        for i, cyc in zip(indices, cycles):
            c = self._proposed_by.get(i)
            if c is None or c >= len(self.chains) or cyc is None:
                continue
            here = self.results.get(self.chains[c])
            if here is None or cyc <= here or \
                    self.rng.random() < math.exp(-(cyc - here) / (here * max(self.temperature, 1e-6))):
                self.chains[c] = i
        self.temperature *= self.cooling


class XGBTuner(Tuner):
    """AutoTVM's recipe: an XGBoost ranking model trained on every measurement (and on earlier
    tasks' in `training`), parallel simulated annealing over the model's scores to find the
    points it likes best, and a share of random picks so the model keeps learning."""

    name = "xgb"

    def __init__(self, space: ConvSpace, seed: int = 0, training: TrainingSet | None = None,
                 epsilon: float = 0.05, chains: int = 128, steps: int = 120):
        super().__init__(space, seed)
        self.training = training if training is not None else TrainingSet()
        self.model = XGBCostModel(seed)
        self.epsilon, self.n_chains, self.steps = epsilon, chains, steps
        self._untrained_since = 0     # measurements since the last fit
        self._fitted = False

    def update(self, indices: list[int], cycles: list[int | None]) -> None:
        super().update(indices, cycles)
        for i, cyc in zip(indices, cycles):
            self.training.add(self.space.task.key, self.space.features[i], cyc)
        self._untrained_since += len(indices)

    def next_batch(self, n: int, exclude: set[int]) -> list[int]:
        if not self._fitted or self._untrained_since:
            self._fitted = self.model.fit(self.training)
            self._untrained_since = 0
        if not self._fitted:
            return self.space.sample(self.rng, n, exclude)
        n_random = int(self.rng.binomial(n, self.epsilon)) if self.results else 0   # each pick random w.p. epsilon
        picks = self._anneal(n - n_random, exclude)
        picks += self.space.sample(self.rng, n - len(picks), exclude | set(picks))
        return picks

    def _anneal(self, n: int, exclude: set[int]) -> list[int]:
        """The `n` unmeasured points with the best model scores that parallel chains visited."""
        scores: dict[int, float] = {}

        def score(indices: list[int]) -> np.ndarray:
            new = sorted({i for i in indices if i not in scores})
            if new:
                for i, v in zip(new, self.model.predict(self.space.features[new])):
                    scores[i] = float(v)
            return np.array([scores[i] for i in indices])

        measured_best = sorted((c, i) for i, c in self.results.items() if c)[: self.n_chains // 2]
        states = [i for _, i in measured_best]
        states += self.space.sample(self.rng, self.n_chains - len(states), set(states))
        current = score(states)
        spread = float(np.std(current)) or 1.0
        stale = 0
        best_seen = -np.inf
        for step in range(self.steps):
            temperature = 1.0 - step / self.steps
            proposals = [self.space.mutate(s, self.rng) for s in states]
            new = score(proposals)
            accept = (new >= current) | (self.rng.random(len(states)) <
                                         np.exp((new - current) / (spread * max(temperature, 1e-3))))
            states = [p if a else s for p, s, a in zip(proposals, states, accept)]
            current = np.where(accept, new, current)
            top = max(scores.values())
            stale = 0 if top > best_seen else stale + 1
            best_seen = max(best_seen, top)
            if stale >= 30:
                break
        ranked = sorted((i for i in scores if i not in exclude), key=lambda i: -scores[i])
        return ranked[:n]


def make_tuner(name: str, space: ConvSpace, seed: int = 0, training: TrainingSet | None = None) -> Tuner:
    if name == "xgb":
        return XGBTuner(space, seed, training)
    if name == "random":
        return RandomTuner(space, seed)
    if name == "grid":
        return GridTuner(space, seed)
    if name == "sa":
        return AnnealingTuner(space, seed)
    raise VtaError(f"unknown tuner {name!r}; use one of {', '.join(TUNERS)}")
