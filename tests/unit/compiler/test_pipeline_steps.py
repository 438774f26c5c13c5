"""The compile's steps: each one reported to the progress callback before it runs, and timed in the notes."""

from __future__ import annotations

import numpy as np

import vtakit
from vtakit.compiler import zoo
from vtakit.compiler.pipeline import PIPELINE


def test_the_compile_times_its_steps_and_reports_each_to_the_progress_callback():
    calls = []
    rng = np.random.default_rng(0)
    module = vtakit.compile(zoo.build("digits_cnn"), "pynq", calibrate=[rng.standard_normal((1, 1, 8, 8)).astype(np.float32)],
                            progress=lambda phase, done, total: calls.append((phase, done, total)))
    steps = module.notes.step_s
    assert list(steps) == [s.name for s in PIPELINE if "vta" in [t.value for t in s.targets]]
    assert all(seconds >= 0 for seconds in steps.values())
    reported = [c for c in calls if c[0].startswith("compile: ")]
    assert reported[0] == ("compile: import", 0, len(steps)) and reported[-1] == ("compile: done", len(steps), len(steps))
    assert module.notes.step_line().startswith("time per step: ")
