"""The bias as one GEMM micro-op per output entry instead of an ALU ADD of an acc vector.

An ALU ADD with a tensor operand reads the accumulator twice per entry (2 compute cycles), and its
vector arrives by LOAD.ACC, which also runs on the compute module.  Instead one INP entry, `ones`
(lane inputs 1, 127, 127, ..., loaded once per task), times a WGT block per output-channel block
whose row o holds bias[o]'s digits (`packing.bias_digits`) adds the bias in one cycle per entry; the
block is loaded by the load module beside compute.  Same bits: the digits times the lane inputs sum
to the bias exactly.  It applies when every bias fits `block_in` lanes (|bias| <= 63 + 127 * 127 *
(block_in - 1): 241,998 on 16 lanes); else the compiler keeps the ALU ADD.
"""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError
from vtakit.compiler.backends.vta.affine import Affine
from vtakit.compiler.backends.vta.lowering.tensorize import IntrinsicCall
from vtakit.compiler.backends.vta.packing import bias_digits, lane_inputs
from vtakit.isa.arith import ceil_div
from vtakit.isa.config import HwConfig

ONES = "ones"
"""The program tensor holding the bias lanes' inputs (one INP element)."""


def bias_fits(cfg: HwConfig, bias: np.ndarray | None) -> bool:
    """Whether `bias` can be added by the GEMM (every value's digits fit block_in lanes)."""
    return bias is not None and cfg.block_in >= 2 and bias_digits(np.asarray(bias), cfg.block_in) is not None


def ones_input(cfg: HwConfig) -> np.ndarray:
    """The packed `ones` INP element, (1, batch, block_in) int8: every batch row gets the bias."""
    return np.broadcast_to(lane_inputs(cfg.block_in).astype(np.int8), (1, cfg.batch, cfg.block_in)).copy()


def pack_bias_weight(bias: np.ndarray, cfg: HwConfig) -> np.ndarray:
    """(O,) int32 -> (O/bo, bo, bi) int8 WGT blocks of digits; padded channels get zeros."""
    digits = bias_digits(np.asarray(bias), cfg.block_in)
    if digits is None:
        raise CompileError(f"bias values up to {int(np.abs(bias).max())} do not fit {cfg.block_in} GEMM lanes "
                           f"(|bias| <= {63 + 127 * 127 * (cfg.block_in - 1)})", op="conv2d")
    ob = ceil_div(len(bias), cfg.block_out)
    out = np.zeros((ob * cfg.block_out, cfg.block_in), dtype=np.int8)
    out[:len(bias)] = digits
    return np.ascontiguousarray(out.reshape(ob, cfg.block_out, cfg.block_in))


def bias_call(call: IntrinsicCall, ones_base: int) -> IntrinsicCall:
    """The ALU ADD of the bias (its src: the digit block's WGT address) as a GEMM reading `ones`."""
    return IntrinsicCall("gemm", call.loops, call.dst, src=Affine.of(ones_base), wgt=call.src)
