"""Fewer garbage-collector passes while a graph compiles.

A compile allocates a Node, its lists and dicts for every node of every graph copy, and most of them live
until the compile ends.  CPython's cyclic collector runs a young pass every 700 net allocations and, now
and then, a full pass over every live object: on a 60,000-node chain that was about 30 % of the compile's
CPU time, and the share grows with the graph (`benchmarks/graph_scale.py` prints the scaling).  Reference counting
frees almost everything a compile drops; the collector only matters for cycles, so during a compile it
runs a young pass every YOUNG_THRESHOLD allocations instead, and the caller's thresholds come back after.
Results do not depend on when the collector runs.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

YOUNG_THRESHOLD = 100_000
"""Net allocations between young collections during a compile (CPython's default is 700)."""
OLDER_THRESHOLDS = (50, 100)
"""Young passes per middle one, middle passes per full one (CPython's defaults are 10 and 10)."""

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None

F = TypeVar("F", bound=Callable)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Inside the block the collector runs rarely (module docstring); nested and concurrent blocks
    share one setting, and the thresholds found before the outermost one come back when the last ends.
    Thresholds a caller set higher are kept."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            young, *older = _saved
            gc.set_threshold(max(young, YOUNG_THRESHOLD), *(max(a, b) for a, b in zip(older, OLDER_THRESHOLDS)))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None


def with_fewer_collections(fn: F) -> F:
    """`fn` run inside `fewer_collections` (its signature and docstring kept)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with fewer_collections():
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
