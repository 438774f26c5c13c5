"""Lost workers, dead and fake Dask clusters, killed runs (issue 37 causes 5, 10 and 12).

A lost worker is retried and never recorded as a result; a cluster that cannot
run anything is one error within a bound; a killed `vtakit tune` leaves no
process behind.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from vtakit.cli import main
from vtakit.errors import CompileError, DeviceTimeout, VtaError
from vtakit.scheduling import explore as explore_mod
from vtakit.scheduling.design_space import parse_space
from vtakit.scheduling.executor import InlineExecutor, executor, run_jobs
from vtakit.scheduling.explore import JOB_LOG, explore

DIE = "VTAKIT_TEST_DIE"    # read by tests/support/dying_jobs.py in the pool workers

SPACE = """
[base]
preset = "pynq"
[sweep]
clock_mhz = [100, 200]
"""


@pytest.fixture
def dying(monkeypatch):
    """explore's measure job replaced by one that can kill its worker. Spawned workers find a `tests`
    package in site-packages before this repository's, so the module goes in as a top-level one."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "support"))
    monkeypatch.setattr(explore_mod, "measure_point", importlib.import_module("dying_jobs").measure_or_die)


def _explore(tmp_path, workers=1, retries=2):
    points = parse_space(SPACE).points
    with executor(workers=workers) as ex:
        return explore("digits_cnn", points, ex, tmp_path, synth=False, retries=retries)


def _logged(tmp_path) -> list[dict]:
    return [json.loads(line)["result"] for line in (tmp_path / JOB_LOG).read_text().splitlines()]


# ------------------------------------------------------------------ pools
def test_a_killed_pool_worker_is_retried_and_nothing_failed_is_cached(tmp_path, monkeypatch, dying):
    monkeypatch.setenv(DIE, f"once:{tmp_path / 'died'}")
    result = _explore(tmp_path)
    assert (tmp_path / "died").exists()                               # a worker did die
    assert [r["status"] for r in result.records] == ["ok"] * 2
    assert len(_logged(tmp_path)) == 2 and not any("failed" in r for r in _logged(tmp_path))


def test_workers_lost_past_the_retries_is_one_error_and_a_rerun_completes(tmp_path, monkeypatch, dying):
    monkeypatch.setenv(DIE, "always")
    with pytest.raises(VtaError, match=r"a worker was lost 2 times running measured clock_mhz=\d+ "
                                       r"\(BrokenProcessPool\); finished jobs are kept, rerun to continue"):
        _explore(tmp_path, retries=1)
    assert not (tmp_path / JOB_LOG).read_text()                       # no failure cached
    monkeypatch.setenv(DIE, "")
    again = _explore(tmp_path)                                        # no --fresh needed
    assert again.reused_jobs == 0 and [r["status"] for r in again.records] == ["ok"] * 2


def test_lost_workers_logged_by_an_older_run_run_again(tmp_path, dying):
    first = _explore(tmp_path, workers=0)
    lines = (tmp_path / JOB_LOG).read_text().splitlines()
    lost = {"failed": {"stage": "measure", "error": "BrokenProcessPool", "reason": "internal error"}}
    (tmp_path / JOB_LOG).write_text("\n".join(lines[:1] + [json.dumps({"key": json.loads(ln)["key"],
                                                                         "result": lost}) for ln in lines[1:]]))
    again = _explore(tmp_path, workers=0)
    assert again.reused_jobs == 1 and again.records == first.records


def test_deterministic_failures_are_cached_and_others_are_not(tmp_path):
    points = parse_space(SPACE + '[[point]]\nname = "no room"\nwgt_buff_bytes = 512\n').points
    points = [p for p in points if p.name in ("clock_mhz=100", "no room")]
    with executor(workers=0) as ex:
        result = explore("digits_cnn", points, ex, tmp_path, synth=False)
    assert [r["status"] for r in result.records] == ["ok", "failed"]
    logged = _logged(tmp_path)
    assert len(logged) == 2 and sum("failed" in r for r in logged) == 1     # a CompileError is an outcome
    assert explore_mod._deterministic(explore_mod._failure("measure", CompileError("no tiling")))
    for transient in (MemoryError(), DeviceTimeout("over its time limit"), OSError("disk full")):
        assert not explore_mod._deterministic(explore_mod._failure("measure", transient))


class _Scripted(InlineExecutor):
    """Each submission takes the next scripted outcome: an exception to fail with, or a value."""

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs) -> Future:
        self.submitted += 1
        future: Future = Future()
        outcome = self.outcomes.pop(0)
        if outcome == "cancel":
            future.cancel()
            future.set_running_or_notify_cancel()
        elif isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
        return future


def test_run_jobs_retries_lost_workers_and_hands_back_the_jobs_own_errors():
    from distributed import KilledWorker

    ex = _Scripted([BrokenProcessPool("gone"), ValueError("bug"), KilledWorker("k", "w", 3), "cancel", 7])
    got = dict(run_jobs(ex, {k: (lambda e: e.submit(print)) for k in ("a", "b")}, retries=3))
    assert ex.submitted == 5 and got["a"].result() == 7 and isinstance(got["b"].exception(), ValueError)


def test_run_jobs_cancels_what_is_left_when_it_gives_up():
    left: Future = Future()
    ex = _Scripted([CancelledError(), CancelledError()])
    jobs = {"lost": lambda e: e.submit(print), "waiting": lambda e: left}
    with pytest.raises(VtaError, match="lost 2 times running lost"):
        list(run_jobs(ex, jobs, retries=1))
    assert left.cancelled()


# ------------------------------------------------------------------ Dask
class _GarbageServer:
    """A TCP service that is not Dask: it answers every connection with an HTTP error."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 8)
                time.sleep(0.2)


def test_a_non_dask_service_is_one_line_without_a_huge_allocation():
    server = _GarbageServer()
    with pytest.raises(VtaError, match="does not answer as a Dask scheduler .* it sent b'HTTP/1.1'"):
        _within(30, lambda: _connect(server.address, 30))     # the probe sees the garbage at once
    server.sock.close()


def _within(seconds: float, fn):
    """fn() run in a thread: its result or its exception, or a test failure if it takes over `seconds`
    (what used to wait forever must not hang the test suite)."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still waiting after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["result"]


def _connect(address: str, timeout_s: float):
    with executor(dask=address, connect_timeout_s=timeout_s):
        pass


def test_a_silent_service_is_one_line_after_the_connect_timeout():
    sock = socket.create_server(("127.0.0.1", 0))        # accepts (backlog), never speaks
    with pytest.raises(VtaError, match="cannot reach the Dask scheduler .*: no answer within 0.5 s"):
        _within(30, lambda: _connect(f"tcp://127.0.0.1:{sock.getsockname()[1]}", 0.5))
    sock.close()


@pytest.mark.parametrize("address", ["garbage", "tcp://", "tcp://host:notaport", "tcp://:::",
                                     "http://127.0.0.1:8786", "tcp://127.0.0.1:99999", "tcp://a b:1"])
def test_malformed_dask_addresses_are_one_line(address, tmp_path, capsys):
    with pytest.raises(VtaError, match="bad Dask scheduler address"):
        with executor(dask=address):
            pass
    assert main(["tune", "--dask", address, "--log", str(tmp_path / "t.jsonl"), "--layers", "dense"]) == 1
    err = capsys.readouterr().err.strip()
    assert "bad Dask scheduler address" in err and "Traceback" not in err


def test_a_dask_cluster_without_workers_is_one_error_within_the_bound(tmp_path, capsys):
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None,
                      silence_logs=50) as cluster:
        code = _within(60, lambda: main(["tune", "--dask", cluster.scheduler_address, "--dask-timeout", "2",
                                         "--layers", "dense", "--trials", "2", "--log", str(tmp_path / "t.jsonl")]))
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert "has had no workers for 2 s" in err and "Traceback" not in err


def test_a_dask_worker_killed_mid_run_loses_no_job():
    """A real worker process of a two-worker cluster killed with SIGKILL while it runs jobs: every job still
    finishes (Dask moves the lost worker's jobs to the other, and run_jobs resubmits any it reports lost)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None, silence_logs=50) as cluster:
        victim = next(iter(cluster.workers.values())).process.pid
        with executor(dask=cluster.scheduler_address, dead_after_s=30) as ex:
            jobs = {k: (lambda e: e.submit(time.sleep, 0.4, pure=False)) for k in range(8)}

            def finish_all() -> list[int]:
                done = []
                for key, future in run_jobs(ex, jobs):
                    assert future.exception() is None, future.exception()
                    done.append(key)
                    if len(done) == 1:
                        os.kill(victim, signal.SIGKILL)
                return done

            done = _within(120, finish_all)
    assert sorted(done) == list(range(8))


# ------------------------------------------------------------------ killed runs
def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first found through /proc)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"      # a zombie has exited
    except OSError:
        return False


def _start_until_its_pool_runs(cmd: list[str], ready=lambda: True) -> tuple[subprocess.Popen, list[int]]:
    """Start `cmd`; return once `ready()` holds and it has two processes below it (or after 120 s)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, workers = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None and not (len(workers) >= 2 and ready()):
        time.sleep(0.05)
        workers = _descendants(proc.pid)
    return proc, workers


def _kill_9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _expect_gone_within_10_s(workers: list[int], command: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.1)
    left = [p for p in workers if _alive(p)]
    for p in left:                                                     # do not leave them to the next test
        os.kill(p, signal.SIGKILL)
    assert not left, f"{len(left)} of {len(workers)} processes outlived the killed {command} by 10 s"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_tune_leaves_no_worker_behind(tmp_path):
    log = tmp_path / "t.jsonl"
    cmd = [sys.executable, "-m", "vtakit", "tune", "--layers", "dense", "--trials", "400", "--workers", "2",
           "--tuner", "random", "--batch", "2", "--log", str(log)]
    proc, workers = _start_until_its_pool_runs(cmd, lambda: log.exists() and log.read_text().count("\n") >= 2)
    try:
        assert len(workers) >= 2, "the pool never started"
    finally:
        _kill_9(proc)
    _expect_gone_within_10_s(workers, "tune")


EXPLORE_SPACE = """
[base]
preset = "pynq"

[sweep]
clock_mhz = [100, 125, 150, 175, 200, 225, 250, 275]

[options]
network = "digits_cnn"
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_explore_leaves_no_worker_behind_and_a_rerun_completes(tmp_path):
    """The pool of `vtakit explore` dies with it; a rerun finishes every job from what was logged."""
    space, out = tmp_path / "space.toml", tmp_path / "out"
    space.write_text(EXPLORE_SPACE)
    cmd = [sys.executable, "-m", "vtakit", "explore", "--space", str(space), "--no-synth", "--workers", "2",
           "-o", str(out)]
    proc, workers = _start_until_its_pool_runs(cmd)
    try:
        assert len(workers) >= 2, "the pool never started"
    finally:
        _kill_9(proc)
    _expect_gone_within_10_s(workers, "explore")
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    jobs = [json.loads(line) for line in (out / "jobs.jsonl").read_text().splitlines() if line.strip()]
    keys = [j["key"] for j in jobs]
    assert len(keys) == len(set(keys)) == 8, "a job was lost or logged twice"
    assert all("result" in j for j in jobs)
