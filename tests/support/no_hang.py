"""`no_hang(seconds)`: fail a test that runs too long instead of hanging the suite (SIGALRM,
main thread only; long C loops return to Python often enough to be interrupted)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_hang(seconds: int = 60) -> Iterator[None]:
    def give_up(*_):
        raise AssertionError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
