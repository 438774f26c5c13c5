"""Running kernel properties with hypothesis: one property, two budgets, reproducible, guarded.

A property takes a `case` (a dict of shapes and parameters drawn by hypothesis,
plus a `seed` for the array contents, which numpy draws: hypothesis would be
slow at building large arrays) and a `Backend` that runs a kernel by name under
guards.  `budgets()` gives a unit test its fast number of examples; `sweeps()`
copies those tests with SWEEP_EXAMPLES for an integration module, which marks
them slow (`make test-slow`).  Both use a seed derived from the family's name
and no example database, so CI runs the same cases every time.

With SWEEP_LOG=path in the environment, every case tried is appended to that
file as "family<TAB>examples<TAB>case without seed", which is how the sweep
figures (cases and distinct shapes per family) are counted.
"""

from __future__ import annotations

import os
import types
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import pytest
from tests.support.guards import guarded_call
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from vtakit.compiler.backends import cpu

FAST_EXAMPLES = 12
SWEEP_EXAMPLES = 200
U32 = 2.0 ** -24  # float32 unit roundoff


class Backend(Protocol):
    """Runs a kernel family by its public name on numpy arrays, under guards, returning numpy."""

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> np.ndarray: ...


def cpu_backend(name: str, *args: Any, **kwargs: Any) -> np.ndarray:
    """compiler.backends.cpu.<name> through the guard-byte harness."""
    return guarded_call(getattr(cpu, name), *args, **kwargs)


def budgets(fast: int = FAST_EXAMPLES) -> pytest.MarkDecorator:
    """parametrize("examples"): `fast` examples, the unit test's budget (`sweeps` gives the long one)."""
    return pytest.mark.parametrize("examples", [pytest.param(fast, id="fast")])


_SWEEP = pytest.mark.parametrize("examples", [pytest.param(SWEEP_EXAMPLES, id="sweep")]).mark


def _is_budget(mark: pytest.Mark) -> bool:
    return mark.name == "parametrize" and mark.args[0] == "examples"


def sweeps(module: types.ModuleType) -> dict[str, Callable[..., None]]:
    """Every test of `module` under budgets(), copied with SWEEP_EXAMPLES examples instead (its other
    parametrizations kept), by name: one property, written once, runs in both suites."""
    copies: dict[str, Callable[..., None]] = {}
    for name, test in vars(module).items():
        marks = getattr(test, "pytestmark", [])
        if not name.startswith("test_") or not any(_is_budget(m) for m in marks):
            continue
        copy = types.FunctionType(test.__code__, test.__globals__, name, test.__defaults__, test.__closure__)
        copy.__doc__ = test.__doc__
        copy.pytestmark = [_SWEEP if _is_budget(m) else m for m in marks]
        copies[name] = copy
    return copies


def check(examples: int, family: str, cases: st.SearchStrategy, prop: Callable[[dict], None]) -> None:
    """prop(case) for `examples` cases of `cases`; hypothesis shrinks and reports the first failure."""
    log = os.environ.get("SWEEP_LOG")

    def run(case: dict) -> None:
        if log:
            key = {k: v for k, v in case.items() if k != "seed"}
            with open(log, "a") as f:
                f.write(f"{family}\t{examples}\t{key!r}\n")
        prop(case)

    test = settings(max_examples=examples, deadline=None, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))(given(cases)(run))
    seed(zlib.crc32(family.encode()))(test)()


# -- array contents -----------------------------------------------------------------------------

def int8_data(rng: np.random.Generator, shape: tuple[int, ...], style: str = "uniform") -> np.ndarray:
    """uniform over int8, "extreme" (only -128 and 127: the largest sums) or "small" (-3..3)."""
    if style == "extreme":
        return rng.choice(np.array([-128, 127], np.int8), shape)
    low, high = (-3, 4) if style == "small" else (-128, 128)
    return rng.integers(low, high, shape).astype(np.int8)


def float_data(rng: np.random.Generator, shape: tuple[int, ...], style: str = "dyadic") -> np.ndarray:
    """"dyadic": multiples of 1/4 in [-8, 8], so products and sums of up to 16384 of them are exact in float32
    whatever the summation order (results compare bit for bit); "normal": standard normal (compared within the
    float32 summation error bound)."""
    if style == "dyadic":
        return (rng.integers(-32, 33, shape) / 4).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def with_specials(rng: np.random.Generator, x: np.ndarray, nan: bool = True) -> np.ndarray:
    """float32 x with a few elements replaced by inf, -inf, -0.0, a subnormal, a huge value (and NaN)."""
    specials = np.array([np.inf, -np.inf, -0.0, 1e-40, -3e38, 3e38] + ([np.nan] if nan else []), np.float32)
    flat = x.reshape(-1).copy()
    where = rng.random(flat.size) < 0.05
    flat[where] = rng.choice(specials, int(where.sum()))
    return flat.reshape(x.shape)


def data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, style: str = "uniform") -> np.ndarray:
    """Random contents of any layout dtype (copies only care about the bytes)."""
    if dtype == "float32":
        return float_data(rng, shape, "normal" if style == "uniform" else style)
    if dtype == "int8":
        return int8_data(rng, shape, style)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


# -- comparisons ----------------------------------------------------------------------------------

def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype, shape and values (NaN equals NaN)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def assert_sum_close(got: np.ndarray, want: np.ndarray, bound: np.ndarray, terms: int) -> None:
    """float32 `got` within the worst-case error of summing `terms` float32 products: (terms + 2) u sum|terms|
    (`bound` is the reference computed on absolute values), against a float64 `want`."""
    assert got.dtype == np.float32 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    tolerance = (terms + 2) * U32 * bound + 1e-30
    error = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(error - tolerance), error.shape)
    assert (error <= tolerance).all(), \
        f"at {worst}: got {got[worst]}, want {want[worst]} (tolerance {tolerance[worst]})"


def assert_float(got: np.ndarray, want: np.ndarray, exact: bool, bound: np.ndarray | None = None,
                 terms: int = 1) -> None:
    """Bit for bit when the data make float32 arithmetic exact, else within the summation bound."""
    if exact:
        assert_same(got, want.astype(np.float32))
    else:
        assert_sum_close(got, want, np.abs(want) if bound is None else bound, terms)
