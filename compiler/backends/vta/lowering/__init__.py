"""The lowering steps from a scheduled loop nest to an instruction stream, in the order they run.

These are not whole-program passes: `codegen` walks the loop nest's statements
once and calls the per-statement steps on each; the first two run before the
walk and the last after it.  `LOWERING_STEPS` is the one list of that order;
`codegen` imports each step from here.  Adding a step is one module in this
folder plus one entry below (and its call in `codegen`).
"""

from __future__ import annotations

from vtakit.compiler.backends.vta.lowering.bias import ONES, bias_call, bias_fits, ones_input, pack_bias_weight
from vtakit.compiler.backends.vta.lowering.capacity import allocate
from vtakit.compiler.backends.vta.lowering.dma import Fill, plan_transfers
from vtakit.compiler.backends.vta.lowering.move import IDENTITY, added_call, direct_operands, identity_weight, moved_calls, moves_int8, stage_name
from vtakit.compiler.backends.vta.lowering.pool import POOL_CARRY, POOL_OUT, POOL_ROWS, after_pool, halo_rows, pool_calls, pool_tile, pooled_shape, post_calls, tile_order_reason, tiles_in_place
from vtakit.compiler.backends.vta.lowering.tensorize import IntrinsicCall, compute_call, match, tile_calls, tile_op
from vtakit.compiler.backends.vta.lowering.tokens import Record, insert_tokens
from vtakit.compiler.backends.vta.lowering.uops import Folded, UopCache, fold

LOWERING_STEPS: tuple[tuple[str, str], ...] = (
    ("tensorize.match", "once: the compute matches the GEMM / ALU intrinsics, or the operator is refused"),
    ("capacity.allocate", "once: on-chip buffer slots for every tensor and virtual thread, checked against sizes"),
    ("dma.plan_transfers", "per load/store statement: 2-D DMA transfers with padding, and min-fills"),
    ("move.moved_calls / added_call", "per int8 load into acc without LOAD.ACC8: INP load, GEMM reset and "
                                      "identity GEMM; an added operand: one identity GEMM into the output tile"),
    ("bias.bias_call", "per bias ADD whose digits sit in WGT: one GEMM of the `ones` INP entry into the tile"),
    ("tensorize.compute_call / tile_calls", "per compute and epilogue statement: intrinsic calls over a tile"),
    ("pool.pool_calls / post_calls", "per output tile of a conv with a fused max pool: ALU passes pooling the "
                                      "tile on chip (halo rows carried between tiles), the epilogue's monotone "
                                      "tail on the pooled tile, the pooled rows' store"),
    ("uops.fold + UopCache", "per call: loops folded into GEMM/ALU iterations, micro-op kernels kept resident"),
    ("tokens.insert_tokens", "once, after the walk: dependency tokens between load, compute and store"),
)

__all__ = ["IDENTITY", "LOWERING_STEPS", "ONES", "POOL_CARRY", "POOL_OUT", "POOL_ROWS", "after_pool", "bias_call",
           "bias_fits", "halo_rows", "ones_input", "pack_bias_weight", "pool_calls", "pool_tile", "pooled_shape",
           "post_calls", "tile_order_reason", "tiles_in_place", "Fill", "Folded", "IntrinsicCall", "Record",
           "UopCache", "allocate",
           "added_call", "compute_call", "direct_operands", "fold", "identity_weight", "insert_tokens", "match",
           "moved_calls",
           "moves_int8", "plan_transfers", "stage_name", "tile_calls", "tile_op"]
