"""Jobs for process-pool tests that kill their own worker on cue (importable by spawned workers)."""

from __future__ import annotations

import os

DIE = "VTAKIT_TEST_DIE"
"""Environment variable: "once:FLAG" (the first job to create FLAG dies), "always", or empty."""


def measure_or_die(network, cfg, images, seed, tuning_logs=()):
    """Stands in for explore.measure_point: ends its worker process as $VTAKIT_TEST_DIE says, else a record."""
    mode = os.environ.get(DIE, "")
    if mode == "always":
        os._exit(3)
    if mode.startswith("once:"):
        try:
            os.close(os.open(mode[5:], os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os._exit(3)                  # a worker killed in the middle of a job
    return {"images": images, "cycles": 1000, "latency_ms": 1000 / (cfg.clock_mhz * 1e3), "utilization": 0.5,
            "gops": 1.0, "tuned_layers": 0, "cosine": 1.0, "seconds": {"compile": 0.0}}
