"""Where measurements run: a local process pool, or a Dask cluster through `Client.get_executor()`.

Tuning and design-space sweeps are many independent compile-and-measure jobs;
both reach workers only through a `concurrent.futures.Executor`, so a laptop,
a Dask cluster and a PYNQ board running a Dask worker look the same to them.
Jobs must be module-level functions with picklable arguments.

Workers get lost: a pool process is killed, a Dask worker dies, a whole cluster
goes away.  `run_jobs` runs a set of jobs through any of these executors and
tells a lost worker (retried on a fresh pool, a bounded number of times) from a
job's own outcome, so callers never record an accident as a result; a cluster
with no worker left is one error within `dead_after_s`, never a silent wait.
Local pool workers exit by themselves when the process that started them dies.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, CancelledError, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from distributed import Client

from vtakit.errors import VtaError

DEAD_AFTER_S = 60.0
"""How long a Dask cluster may have no worker (or no scheduler) before the run gives up."""
RETRIES = 2
"""How many times a job whose worker was lost is run again before the run gives up."""
_PARENT_POLL_S = 0.25


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


# ------------------------------------------------------------------ local pool
def _exit_with_parent(parent_pid: int) -> None:
    """Pool worker initializer: a daemon thread ends this worker once its parent is gone.

    A `kill -9` of `vtakit tune` gives the pool no chance to stop its workers; without this they
    would live on (re-parented) holding their memory.  Polling `getppid` works on every POSIX
    system and needs no help from the parent."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    if os.getppid() != parent_pid:       # the parent died before this worker got going
        os._exit(1)
    threading.Thread(target=watch, name="vtakit-parent-watch", daemon=True).start()


class LocalPool(Executor):
    """A process pool that replaces itself when broken (a worker was killed) and whose workers
    die with this process."""

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn: the parent may hold threads (progress bars, Dask), which fork does not survive well.
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_exit_with_parent, initargs=(os.getpid(),))

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        try:
            return self.pool.submit(fn, *args, **kwargs)
        except BrokenProcessPool:        # a worker died: its jobs failed; later ones go to a fresh pool
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = self._new_pool()
            return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    def terminate(self) -> None:
        """Stop now, running jobs included (after an error or Ctrl-C: nobody waits for their results)."""
        processes = list((getattr(self.pool, "_processes", None) or {}).values())  # no public API before 3.14
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            if p.is_alive():
                p.kill()
        for p in processes:
            p.join(timeout=5)


# ------------------------------------------------------------------ Dask
_ADDRESS = re.compile(r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})")
_SCHEMES = ("tcp", "tls")
_HANDSHAKE_MAX = 1 << 20


def check_dask_address(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a Dask scheduler address (tcp://host:port, tls://host:port, host:port)."""
    m = _ADDRESS.fullmatch(address.strip())
    if not m or (m["scheme"] or "tcp") not in _SCHEMES or not 0 < int(m["port"]) < 65536:
        raise VtaError(f"bad Dask scheduler address {address!r}: expected tcp://HOST:PORT (or tls://HOST:PORT), "
                       "e.g. tcp://127.0.0.1:8786")
    return m["scheme"] or "tcp", m["host"].strip("[]"), int(m["port"])


def _probe(address: str, timeout_s: float) -> None:
    """VtaError unless something listens at `address` and, over plain TCP, opens with a Dask frame.

    A Dask server speaks first: 8 bytes giving the length of its handshake (tens of bytes).  Anything
    else (an HTTP server, say) would make the Dask client allocate whatever those bytes spell, exabytes."""
    scheme, host, port = check_dask_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            head = b""
            while scheme == "tcp" and len(head) < 8:
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    break
                head += chunk
    except TimeoutError:
        raise VtaError(f"cannot reach the Dask scheduler at {address}: no answer within {timeout_s:g} s") from None
    except OSError as e:
        raise VtaError(f"cannot reach the Dask scheduler at {address}: {e.strerror or type(e).__name__}") from None
    if scheme == "tcp" and (len(head) < 8 or not 0 < struct.unpack("Q", head)[0] <= _HANDSHAKE_MAX):
        raise VtaError(f"{address} does not answer as a Dask scheduler (is another service on that port?): "
                       f"it sent {head[:8]!r}")


class DaskPool(Executor):
    """Jobs on a Dask cluster; `check` raises once the cluster has had no worker (or the scheduler
    has not answered) for `dead_after_s`."""

    def __init__(self, client: Any, address: str, dead_after_s: float):
        self.client = client
        self.address = address
        self.dead_after_s = dead_after_s
        self.inner = client.get_executor()
        self._unusable_since: float | None = None
        self._last_check = 0.0

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        return self.inner.submit(fn, *args, **kwargs)

    def check(self) -> None:
        """VtaError if the cluster has been unusable for too long; called while waiting on jobs."""
        now = time.monotonic()
        if now - self._last_check < min(1.0, self.dead_after_s / 4):
            return
        self._last_check = now
        why = None
        try:
            if not self.client.nthreads(callback_timeout=max(0.5, min(10.0, self.dead_after_s / 2))):
                why = "has had no workers"
        except Exception as e:  # noqa: BLE001 - a lost scheduler shows as OSError, TimeoutError, CommClosedError
            why = f"has not answered ({type(e).__name__})"
        if why is None:
            self._unusable_since = None
            return
        self._unusable_since = self._unusable_since or now
        if time.monotonic() - self._unusable_since >= self.dead_after_s:
            raise VtaError(f"the Dask cluster at {self.address} {why} for {self.dead_after_s:g} s; "
                           "results so far are kept: rerun when it has workers")

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        try:
            self.client.close(timeout=5)
        except Exception:  # noqa: BLE001 - a dead scheduler cannot be told goodbye
            pass


def _silence_dask_logging() -> None:
    """Silence distributed's own logging for the rest of the process: it prints tracebacks when a
    scheduler goes away, some from its event-loop thread after the client is closed. The run
    reports what matters itself, in one line (distributed configured its own logging when this module
    imported it; this goes over that)."""
    logging.getLogger("distributed").setLevel(logging.CRITICAL + 1)
    for name, lg in list(logging.root.manager.loggerDict.items()):   # children with levels of their own
        if name.startswith("distributed.") and isinstance(lg, logging.Logger):
            lg.setLevel(logging.CRITICAL + 1)


def _connect(address: str, connect_timeout_s: float) -> Any:
    try:
        return Client(address, timeout=f"{connect_timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise VtaError(f"cannot reach the Dask scheduler at {address}: {e}") from None
    except Exception as e:  # noqa: BLE001 - garbage from a non-Dask service: MemoryError, ValueError, ...
        raise VtaError(f"{address} does not answer as a Dask scheduler (is another service on that port?): "
                       f"{type(e).__name__}: {e}") from None


@contextmanager
def executor(dask: str | None = None, workers: int | None = None,
             connect_timeout_s: float = 10.0, dead_after_s: float = DEAD_AFTER_S) -> Iterator[Executor]:
    """An Executor for measurement jobs.

    dask: a scheduler address ("tcp://host:8786") to run on that cluster (given up on after
    `dead_after_s` without a worker); None for a local process pool of `workers` processes
    (default one per core; 0 runs jobs inline)."""
    if not dead_after_s > 0:            # NaN too: it would never give up
        raise VtaError(f"the Dask timeout must be > 0 seconds, got {dead_after_s}")
    if dask:
        address = dask.strip()
        _probe(address, connect_timeout_s)
        _silence_dask_logging()
        dask_pool = DaskPool(_connect(address, connect_timeout_s), address, dead_after_s)
        try:
            yield dask_pool
        finally:
            dask_pool.shutdown()
        return
    if workers is not None and workers < 0:
        raise VtaError(f"workers must be >= 0, got {workers}")
    if workers == 0:
        yield InlineExecutor()
        return
    pool = LocalPool(workers or default_workers())
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------ running jobs
def is_lost_worker(error: BaseException) -> bool:
    """Whether a job's exception says its worker was lost (worth running again), not how the job went."""
    if isinstance(error, (BrokenProcessPool, CancelledError)):
        return True
    name, module = type(error).__name__, type(error).__module__
    return module.startswith("distributed") and name in ("KilledWorker", "CommClosedError", "FutureCancelledError")


def _outcome(future: Future) -> BaseException | None:
    if future.cancelled():
        return CancelledError()
    return future.exception()


K = Hashable


def run_jobs(ex: Executor, jobs: Mapping[K, Callable[[Executor], Future]], *, retries: int = RETRIES,
             describe: Callable[[K], str] = str, poll_s: float = 0.5) -> Iterator[tuple[K, Future]]:
    """Submit every job (`jobs[key](ex)` returns its Future) and yield (key, future) as each finishes
    with an outcome of its own: a result, or an exception other than a lost worker.

    A job whose worker was lost is submitted again, at most `retries` times; then VtaError.
    While waiting, `ex.check()` (where the executor has one, as DaskPool does) may give up."""
    attempts = dict.fromkeys(jobs, 0)
    live: dict[Future, K] = {}
    check = getattr(ex, "check", None)
    try:
        for key, submit in jobs.items():
            live[submit(ex)] = key
        while live:
            finished, _ = wait(list(live), timeout=poll_s, return_when=FIRST_COMPLETED)
            finished |= {f for f in live if f.cancelled()}   # cancelled, never notified: wait() misses it
            for future in finished:
                key = live.pop(future)
                error = _outcome(future)
                if error is None or not is_lost_worker(error):
                    yield key, future
                    continue
                attempts[key] += 1
                if attempts[key] > retries:
                    raise VtaError(f"a worker was lost {attempts[key]} times running {describe(key)} "
                                   f"({type(error).__name__}); finished jobs are kept, rerun to continue")
                live[jobs[key](ex)] = key
            if check is not None and not finished:
                check()
    finally:
        for future in live:
            future.cancel()
