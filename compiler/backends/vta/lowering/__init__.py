"""The lowering steps from a scheduled loop nest to an instruction stream.

These are not whole-program passes: `codegen` walks the loop nest's statements once (the walk
emits each statement through `dma`, `move`, `bias`, `tensorize`, `pool` and `uops.fold`) and runs the
registered steps before the walk, on each intrinsic call and after it (`steps.py`: the phases, the
registry; `lowering_steps()` lists them all in the order they run).  Each step module registers its
own steps at its end; the import line below is the list of step modules.  Adding a step is one module
in this folder plus its name in that line.
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
from vtakit.compiler.backends.vta.lowering.steps import Phase, LoweringStep, lowering_steps, register_step, steps, unregister_step
from vtakit.compiler.backends.vta.lowering import bias, capacity, dma, move, pool, tensorize, tokens, uops  # noqa: F401  (the step modules)

__all__ = ["IDENTITY", "LoweringStep", "ONES", "Phase", "POOL_CARRY", "POOL_OUT", "POOL_ROWS", "after_pool", "bias_call",
           "bias_fits", "halo_rows", "ones_input", "pack_bias_weight", "pool_calls", "pool_tile", "pooled_shape",
           "post_calls", "tile_order_reason", "tiles_in_place", "Fill", "Folded", "IntrinsicCall", "Record",
           "UopCache", "allocate",
           "added_call", "compute_call", "direct_operands", "fold", "identity_weight", "insert_tokens", "lowering_steps", "match",
           "moved_calls",
           "moves_int8", "plan_transfers", "register_step", "stage_name", "steps", "tile_calls", "tile_op",
           "unregister_step"]
