"""Simulator speed benchmark: GEMM micro-ops per second on both models.

Two programs shaped like compiled convolutions (see `workloads`): one of about
2 M GEMM micro-ops in large tiles, and a ResNet-18-sized stream of about 7 M
micro-ops in smaller tiles (more instructions, as a compiler would emit).
"""

from __future__ import annotations

from vtakit.isa.config import HwConfig
from vtakit.sim import run_image
from vtakit.sim.workloads import ConvTile, conv_tiles_expected, conv_tiles_program
from vtakit.isa.arith import ceil_div

PROGRAMS = {
    "gemm-2M": (ConvTile(rows=14, cols=14, cin_blocks=4, cout_blocks=2, kernel=3), 2_000_000),
    "resnet18-sized": (ConvTile(rows=7, cols=14, cin_blocks=4, cout_blocks=2, kernel=3), 7_000_000),
}


def sim_speed(cfg: HwConfig, programs: list[str], models: list[str]) -> list[dict]:
    """Run each program on each model; one result row per run."""
    rows = []
    for name in programs:
        tile, uops = PROGRAMS[name]
        tiles = ceil_div(uops, tile.gemm_uops)
        image = conv_tiles_program(cfg, tile, tiles=tiles)
        expected = conv_tiles_expected(image, tile)
        for model in models:
            stats, dram = run_image(image, model=model)
            rows.append({
                "program": name, "model": stats.model, "instructions": image.insn_count,
                "gemm_uops": stats.gemm_uops, "wall_s": round(stats.wall_s, 3),
                "muops_per_s": round(stats.gemm_uops / stats.wall_s / 1e6, 3),
                "cycles": stats.cycles, "utilization": stats.utilization,
                "correct": bool((image.read("output", dram) == expected).all()),
            })
    return rows
