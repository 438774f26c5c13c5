"""How an activation's power-of-two exponent is chosen from calibration samples.

Four methods, applied to every tensor (`compile_module(calibration=...)`,
`vtakit compile --calibration`):

- "max": the finest exponent that clips nothing (the largest |value| maps to 127);
- "percentile": the finest exponent that clips at most `PERCENTILE_CLIPPED` of the values;
- "mse": the exponent with the least squared error over all samples (clipping plus rounding;
  what quantize.Calibration does by itself);
- "kl": the exponent whose int8 histogram is closest to the float one in KL divergence
  (TensorRT's entropy calibration, restricted to power-of-two thresholds);
- "search": "max", then each exponent group moved by the error it causes at the network's output
  (`exponent_search`: the offsets land in `MethodCalibration.offsets`).

Candidates are the exponent that clips nothing and the three finer ones.  The
histogram of |value| behind "percentile" and "kl" has bins of 2**-(a + 6), a power of two, so widening its
range merges pairs of bins exactly and every candidate's clipping threshold
falls on a bin edge.

DEFAULT_METHOD is "max", the method of the fallback recipe: compile_module's default is "auto", which tries
max, percentile and mse on the network's outputs (recipe_search.py).  Alone, with bias correction on EfficientNet-Lite0 and the bundled photos
(benchmarks/real_accuracy.py, figures in docs/results.md) it gave the best mean logits cosine
(0.925; mse 0.915, percentile 0.922, kl 0.848) at the same top-1 agreement as mse and percentile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtakit.compiler.options import CalibrationMethod
from vtakit.compiler.quant.quantize import (EXP_RANGE, INT8_REACH, Calibration, candidate_exponents, check_reach,
                                           finite_or_inf, ideal_exponent)
from vtakit.compiler.quant.quantize import calibrate as observe_graph

HISTOGRAM_METHODS = (CalibrationMethod.PERCENTILE, CalibrationMethod.KL)  # the methods that read `MethodCalibration.hist`
DEFAULT_METHOD = CalibrationMethod.MAX
PERCENTILE_CLIPPED = 1e-4
KL_CLIPPED = 0.01
"""The most of a tensor's nonzero values a "kl" candidate may clip.  KL divergence folds the clipped values
into the last bin, so a threshold below nearly all of them leaves one spike on both sides and scores 0:
pooled features, which sit in a narrow band near their maximum, were clipped whole (ResNet-18's centred
classifier: logits cosine 0.01)."""
HIST_BINS = 8192  # bins of |value| over [0, 128 * 2**-a): width 2**-(a + 6)
_FINE = 6


@dataclass
class Histogram:
    """Counts of |value| in bins of width 2**-(anchor + 6) from 0 to 128 * 2**-anchor.

    Only the occupied bins are held (`keys`, sorted, and their `tallies`): a small tensor's histogram costs
    bytes, not the 64 KB of all HIST_BINS (a 200,000-node graph held 13 GB of them).  `counts`
    gives the dense array where it is needed."""

    anchor: int
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))  # occupied bin indices, ascending
    tallies: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # count of each occupied bin
    zeros: int = 0  # exact zeros (ReLU outputs, padding): every exponent represents them exactly

    @property
    def width(self) -> float:
        return 2.0 ** -(self.anchor + _FINE)

    @property
    def counts(self) -> np.ndarray:
        """All HIST_BINS counts (a fresh dense array)."""
        dense = np.zeros(HIST_BINS, np.int64)
        dense[self.keys] = self.tallies
        return dense

    def widen(self) -> None:
        """Double the range: merge neighbouring bins (exact, the edges are powers of two)."""
        halved = self.keys // 2
        merged, first = np.unique(halved, return_index=True)
        self.tallies = np.add.reduceat(self.tallies, first) if first.size else self.tallies
        self.keys = merged.astype(np.int16)
        self.anchor -= 1

    def add(self, value: np.ndarray) -> None:
        mags = np.abs(value.astype(np.float64, copy=False)).ravel()
        nonzero = mags[mags != 0]
        self.zeros += mags.size - nonzero.size
        mags = nonzero
        top = float(mags.max()) if mags.size else 0.0
        while top >= 128 * 2.0 ** -self.anchor and self.anchor > EXP_RANGE[0] - _FINE:
            self.widen()
        if not mags.size:
            return
        idx = np.minimum((mags / self.width).astype(np.int64), HIST_BINS - 1)
        low = int(idx.min())
        if self.keys.size:
            low = min(low, int(self.keys[0]))
        dense = np.bincount(idx - low)  # the occupied span only, then back to (keys, tallies)
        if self.keys.size:
            top_key = int(self.keys[-1]) - low
            if top_key >= dense.size:
                dense = np.concatenate([dense, np.zeros(top_key + 1 - dense.size, np.int64)])
            dense[self.keys.astype(np.int64) - low] += self.tallies
        occupied = np.flatnonzero(dense)
        self.keys = (occupied + low).astype(np.int16)
        self.tallies = dense[occupied].astype(np.int64)

    def edge(self, e: int) -> int:
        """The bin index where candidate exponent e starts clipping: |v| >= 127.5 * 2**-e."""
        return min(HIST_BINS, int(round(127.5 * 2.0 ** (self.anchor + _FINE - e))))

    def clipped_fraction(self, e: int, nonzero: bool = False) -> float:
        """The fraction of the values (`nonzero`: of the nonzero ones) exponent e clips."""
        total = int(self.tallies.sum()) + (0 if nonzero else self.zeros)
        return float(self.tallies[self.keys >= self.edge(e)].sum()) / total if total else 0.0

    def kl_divergence(self, e: int) -> float:
        """KL(P || Q): P the histogram of the nonzero values cut at e's threshold (outliers in the last
        bin), Q its 128 int8 levels spread evenly over the nonzero bins each level covers.  Exact
        zeros are left out: they cost nothing at any exponent, and a ReLU's spike at zero would
        otherwise decide the choice."""
        cut = self.edge(e)
        counts = self.counts
        p = counts[:cut].astype(np.float64)
        if cut == 0 or p.size == 0:
            return float("inf")
        p[-1] += counts[cut:].sum()
        per_level = 2.0 ** (self.anchor + _FINE - e)  # bins per quantization step
        centres = (np.arange(cut) + 0.5) / per_level  # bin centres in units of the step
        level = np.minimum(np.rint(centres), 127).astype(np.int64)
        nonzero = p > 0
        mass = np.bincount(level, weights=p, minlength=128)
        support = np.bincount(level, weights=nonzero.astype(np.float64), minlength=128)
        q = np.where(nonzero, mass[level] / np.maximum(support[level], 1), 0.0)
        ps, qs = p / p.sum(), q / q.sum()
        m = nonzero & (qs > 0)
        if np.any(nonzero & (qs == 0)):
            return float("inf")
        return float(np.sum(ps[m] * np.log(ps[m] / qs[m])))


@dataclass
class MethodCalibration(Calibration):
    """Calibration whose exponents come from one of the methods (compiler.options.CalibrationMethod, not
    "auto"); also keeps each tensor's histogram ("percentile", "kl")."""

    method: CalibrationMethod = DEFAULT_METHOD
    hist: dict[str, Histogram] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)  # tensor -> added to its exponent (exponent_search)

    def observe(self, name: str, value: np.ndarray) -> None:
        """Keep what `method` reads: every method the largest |value|; "mse" the squared error of each
        candidate (quantize.Calibration); "percentile" and "kl" the histogram.  The rest would cost time and
        memory on every tensor for nothing, which adds up on a graph of 200,000 nodes."""
        if self.method == "mse":
            super().observe(name, value)
        else:
            amax = finite_or_inf(float(np.abs(value).max()))  # the method, not np.max: once per tensor and sample
            self.amax[name] = max(self.amax.get(name, 0.0), amax)
        if self.method not in HISTOGRAM_METHODS or not self.amax[name] <= INT8_REACH:
            return  # a mask's range is never a histogram (quantize.unrepresentable keeps it float)
        h = self.hist.get(name)
        if h is None:
            h = self.hist[name] = Histogram(ideal_exponent(float(np.max(np.abs(value)))) - 2)
        h.add(value)

    def candidates(self, name: str) -> range:
        return candidate_exponents(self.amax[name])

    def exponent(self, name: str) -> int:
        if name in self.fixed:  # a QDQ model's own scale (qdq.py)
            return self.fixed[name]
        e = self.local_exponent(name) + self.offsets.get(name, 0)
        return min(max(e, EXP_RANGE[0]), EXP_RANGE[1])

    def local_exponent(self, name: str) -> int:
        """The exponent `method` chooses from this tensor's own samples ("search" starts from "max")."""
        amax = self.amax[name]
        check_reach(name, amax)
        if self.method == "mse" or amax <= 0:
            return super().exponent(name)
        if self.method in ("max", "search"):
            return ideal_exponent(amax)
        h = self.hist[name]
        cands = list(self.candidates(name))
        if self.method == "percentile":
            ok = [e for e in cands if h.clipped_fraction(e) <= PERCENTILE_CLIPPED]
            return max(ok) if ok else cands[0]
        ok = [e for e in cands if h.clipped_fraction(e, nonzero=True) <= KL_CLIPPED] or cands[:1]
        return min(ok, key=lambda e: (h.kl_divergence(e), e))


def calibrate(graph, samples: list[dict[str, np.ndarray]],
              method: CalibrationMethod | str = DEFAULT_METHOD) -> MethodCalibration:
    """Run the float graph over the samples, observing every float tensor, for `method` (one CompileError
    for a value that is not a method: "auto" is the recipe search's, compile_module's)."""
    return observe_graph(graph, samples, MethodCalibration(method=CalibrationMethod.parse(method, concrete=True)))
