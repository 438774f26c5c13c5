"""Micro-op kernels load once, in one transfer at the start (lowering.uops.preload), when none is evicted.

Loaded where each kernel is first used, a micro-op LOAD waits for the memory port, which a weight DMA
holds for thousands of cycles; ResNet-18's C10 lost 1.9 k of 43.9 k cycles to that."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.backends.vta import ops, reference
from vtakit.isa.config import HwConfig
from vtakit.isa.insn import Load
from vtakit.isa.opcodes import MemId

PYNQ = HwConfig.preset("pynq")


def uop_loads(op) -> list[tuple[int, Load]]:
    return [(i, insn) for i, insn in enumerate(op.insns) if isinstance(insn, Load) and insn.mem == MemId.UOP]


def compile_c10_like(cfg: HwConfig):
    op, _ = ops.compile_conv2d(cfg, x_shape=(1, 64, 14, 14), w_shape=(64, 64, 1, 1), stride=2, bias=True,
                               bias_gemm=True, shift=8, clip=(0, 127), name="c10_like")
    return op


# 4 output-channel blocks in tiles of 3: a full tile's kernel (3 x 2 x 9 = 54 micro-ops) and the edge
# tile's (18) do not fit a 64-entry buffer together, so they evict each other.
EVICTING = dict(tile_oc=3, tile_oh=8, tile_ow=8, tile_ic=2, vthreads=1)
SMALL = PYNQ.replace(uop_buff_bytes=256)


def test_the_whole_table_loads_first_in_one_transfer():
    op = compile_c10_like(PYNQ)
    loads = uop_loads(op)
    assert len(op.uop_table) > 1
    assert len(loads) == op.uop_loads == 1
    index, load = loads[0]
    assert index == 0 and (load.sram_base, load.dram_base, load.y_size, load.x_size) == (0, 0, 1, len(op.uop_table))


def test_evicted_kernels_keep_loading_where_they_are_used():
    """Reloaded kernels sit at other on-chip addresses than their DRAM offsets: no preload."""
    op, _ = ops.compile_conv2d(SMALL, x_shape=(1, 32, 8, 8), w_shape=(64, 32, 3, 3), padding=1,
                               schedule=EVICTING, name="evicting")
    assert len(op.uop_table) > SMALL.uop_depth
    assert len(uop_loads(op)) == op.uop_loads > 2
    assert any(load.sram_base != load.dram_base for _, load in uop_loads(op))   # a kernel moved on chip


@pytest.mark.parametrize("cfg, schedule", [(PYNQ, None), (SMALL, EVICTING)], ids=["preloaded", "evicting"])
def test_both_forms_compute_the_same_bits(cfg, schedule):
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 32, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 32, 3, 3), dtype=np.int8)
    b = rng.integers(-4096, 4096, 64, dtype=np.int32)
    want = reference.conv2d(x, w, 1, 1, b, shift=8, clip=(0, 127))
    for device in ("fsim", "sim"):
        y, _ = ops.conv2d(x, w, padding=1, bias=b, shift=8, clip=(0, 127), config=cfg, device=device,
                          schedule=schedule)
        np.testing.assert_array_equal(y, want)
