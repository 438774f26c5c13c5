"""Where measurements run: a local process pool, or a Dask cluster through `Client.get_executor()`.

Tuning and design-space sweeps are many independent compile-and-measure jobs;
both reach workers only through a `concurrent.futures.Executor`, so a laptop,
a Dask cluster and a PYNQ board running a Dask worker look the same to them.
Jobs must be module-level functions with picklable arguments.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

from vtakit.errors import VtaError


class InlineExecutor(Executor):
    """Runs each job at submit time in this process: for `workers=0`, debugging and profiling."""

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - the future carries it, as a pool's would
            future.set_exception(e)
        return future


def default_workers() -> int:
    """One worker per core, at least one."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@contextmanager
def executor(dask: str | None = None, workers: int | None = None,
             connect_timeout_s: float = 10.0) -> Iterator[Executor]:
    """An Executor for measurement jobs.

    dask: a scheduler address ("tcp://host:8786") to run on that cluster; None for a local
    process pool of `workers` processes (default one per core; 0 runs jobs inline)."""
    if dask:
        try:
            from distributed import Client
        except ImportError:  # pragma: no cover - dask[distributed] is a dependency
            raise VtaError("--dask needs the dask[distributed] package") from None
        try:
            client = Client(dask, timeout=f"{connect_timeout_s}s")
        except (OSError, TimeoutError) as e:
            raise VtaError(f"cannot reach the Dask scheduler at {dask}: {e}") from None
        try:
            yield client.get_executor()
        finally:
            client.close()
        return
    if workers is not None and workers < 0:
        raise VtaError(f"workers must be >= 0, got {workers}")
    if workers == 0:
        yield InlineExecutor()
        return
    # spawn: the parent may hold threads (progress bars, Dask), which fork does not survive well.
    pool = ProcessPoolExecutor(max_workers=workers or default_workers(),
                               mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
