"""Schedule spaces: every ConvKnobs a convolution (or dense) task can take, buffers checked first.

A point is a tuple of indices, one per knob, into that knob's list of values.
The space enumerates its valid points once (the knob product is at most tens
of thousands, and the fit check is the heuristic's own arithmetic), so drawing,
mutating and indexing are cheap and a tuner never sends a point that cannot
fit the buffers to a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

import numpy as np

from vtakit.compiler.backends.vta.heuristics import ConvTerms, candidates, conv_terms
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import VtaError
from vtakit.scheduling.features import feature_matrix
from vtakit.scheduling.task import ConvTask

Point = tuple[int, ...]

VTHREAD_CHOICES = (1, 2, 4)


PRUNE = 4.0
"""Points the analytic model puts more than this many times behind the space's best are left out.
They are never competitive, and their many small transfers make them slow to compile and
simulate: on ResNet-18's layers 3.5 s a point against 0.25 s for those within 1.5x of the best."""


@dataclass
class ConvSpace:
    """Tile sizes on every axis, loop order, virtual threads (count and axis), weight hoisting."""

    task: ConvTask
    prune: float | None = PRUNE
    knobs: dict[str, tuple] = field(init=False)
    points: list[Point] = field(init=False)
    terms: list[ConvTerms] = field(init=False)
    _index: dict[Point, int] = field(init=False)
    _features: np.ndarray | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        s = self.task.shape
        self.knobs = {
            "tile_oc": tuple(candidates(s.ocb)), "tile_oh": tuple(candidates(s.oh)),
            "tile_ow": tuple(candidates(s.ow)), "tile_ic": tuple(candidates(s.icb)),
            "order": ("oc", "sp"), "vthread_axis": ("oh", "oc"), "vthreads": VTHREAD_CHOICES,
            "hoist_weights": (False, True),
        }
        self.points, self.terms = [], []
        for point in product(*(range(len(v)) for v in self.knobs.values())):
            k = self.knobs_of(point)
            if k.vthreads == 1 and k.vthread_axis != "oh":
                continue              # one thread: the axis means nothing, keep one spelling
            terms = conv_terms(self.task.cfg, s, k)
            if terms is not None:
                self.points.append(point)
                self.terms.append(terms)
        if self.points and self.prune is not None:
            bound = self.prune * min(t.cycles for t in self.terms)
            keep = [i for i, t in enumerate(self.terms) if t.cycles <= bound]
            self.points = [self.points[i] for i in keep]
            self.terms = [self.terms[i] for i in keep]
        if not self.points:
            raise VtaError(f"no schedule of {self.task.name} ({self.task.key}) fits the buffers of config "
                           f"{self.task.cfg.label}")
        self._index = {p: i for i, p in enumerate(self.points)}

    # ------------------------------------------------------------- size, lookup
    @property
    def raw_size(self) -> int:
        """Knob combinations before the buffer check and the pruning."""
        return int(np.prod([len(v) for v in self.knobs.values()]))

    def __len__(self) -> int:
        return len(self.points)

    def index(self, point: Point) -> int | None:
        return self._index.get(tuple(point))

    def knobs_of(self, point: Point) -> ConvKnobs:
        values = {name: choices[i] for (name, choices), i in zip(self.knobs.items(), point)}
        return ConvKnobs(**values)

    def point_of(self, knobs: ConvKnobs | dict) -> Point | None:
        """The point of these knobs, or None when they are not (valid) in this space."""
        d = knobs.to_dict() if isinstance(knobs, ConvKnobs) else dict(knobs)
        try:
            point = tuple(self.knobs[name].index(d[name]) for name in self.knobs)
        except (KeyError, ValueError):
            return None
        return point if point in self._index else None

    @property
    def features(self) -> np.ndarray:
        """The cost model's features of every valid point (rows in point-index order)."""
        if self._features is None:
            self._features = feature_matrix(self.task, [self.knobs_of(p) for p in self.points], self.terms)
        return self._features

    # --------------------------------------------------------- draw and mutate
    def sample(self, rng: np.random.Generator, count: int, exclude: set[int] | None = None) -> list[int]:
        """Up to `count` distinct valid point indices not in `exclude`, uniformly."""
        exclude = exclude or set()
        free = len(self) - len(exclude)
        if free <= 0:
            return []
        if free <= 4 * count:
            pool = np.array([i for i in range(len(self)) if i not in exclude])
            return [int(i) for i in rng.permutation(pool)[:count]]
        chosen: list[int] = []
        seen = set(exclude)
        while len(chosen) < count:
            i = int(rng.integers(len(self)))
            if i not in seen:
                seen.add(i)
                chosen.append(i)
        return chosen

    def mutate(self, index: int, rng: np.random.Generator, tries: int = 16) -> int:
        """A valid neighbour: one knob moved to an adjacent value (or flipped, for choices of two)."""
        point = self.points[index]
        sizes = [len(v) for v in self.knobs.values()]
        for _ in range(tries):
            axis = int(rng.integers(len(point)))
            if sizes[axis] < 2:
                continue
            step = int(rng.choice((-1, 1)))
            value = min(max(point[axis] + step, 0), sizes[axis] - 1)
            if value == point[axis]:
                value = point[axis] - step
            moved = point[:axis] + (value,) + point[axis + 1:]
            found = self._index.get(moved)
            if found is not None:
                return found
        return int(rng.integers(len(self)))

    # ------------------------------------------------------------- serialise
    def to_dict(self, index: int) -> dict:
        return self.knobs_of(self.points[index]).to_dict()

    def from_dict(self, d: dict) -> int:
        point = self.point_of(d)
        if point is None:
            raise VtaError(f"schedule {d} is not a valid point of the space of {self.task.name}")
        return self._index[point]
