"""dense (fully connected) on the GPU: y[n, o] = sum_k x[n, k] * w[o, k] + bias[o], on the tiled GEMM.

M = outputs (A is w, read along k), N = batch; B(k, n) = x[n, k] is read with
consecutive threads on consecutive k, so both operands load coalesced.  For a
batch of one, the tile rule picks 16-row tiles, so a 1000-way classifier still
spreads over 63 blocks.  int8 follows the CPU backend bit for bit (int32
accumulator, bias, then shift and clip).
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler.backends.host import checks
from vtakit.compiler.backends.host.checks import Requant
from vtakit.compiler.backends.cpu.irgen import F32, I8, I32
from vtakit.compiler.backends.cuda.call import Call
from vtakit.compiler.backends.cuda.conv import _epilogue
from vtakit.compiler.backends.cuda.device_array import GpuBackend, operand
from vtakit.compiler.backends.cuda.gemm import GemmOperands, GemmTile, choose_tile, emit_gemm, gemm_launch, widen
from vtakit.compiler.backends.cuda.kernel import GpuKernelBuilder, make_kernel
from vtakit.compiler.backends.host.matmul import DENSE as OP, dense_operands


@dataclass(frozen=True)
class DenseSpec:
    batch: int
    inputs: int
    outputs: int
    integer: bool
    has_bias: bool
    requant: Requant | None
    tile: GemmTile


def _emit_dense(kb: GpuKernelBuilder, spec: DenseSpec) -> None:
    elem = I32 if spec.integer else F32
    load_ty = I8 if spec.integer else F32
    k = spec.inputs

    def store(m, n, acc) -> None:
        value = _epilogue(kb, acc, m, spec.has_bias, spec.integer, spec.requant)
        kb.store(value, kb["y"], kb.idx((n, spec.outputs), m))

    ops = GemmOperands(
        elem, spec.outputs, spec.batch, k,
        a_row=lambda m: kb.idx((m, k)),
        a_value=lambda row, kk: widen(kb, kb.load(kb["w"], kb.idx(row, kk), load_ty), spec.integer),
        b_column=lambda n: kb.idx((n, k)),
        b_value=lambda column, kk: widen(kb, kb.load(kb["x"], kb.idx(column, kk), load_ty), spec.integer),
        b_k_fastest=True, store=store)
    emit_gemm(kb, spec.tile, ops)


def dense(x, w, bias=None, *, shift: int | None = None, clip: tuple[int, int] | None = None,
          gpu: GpuBackend | None = None):
    """x (N, K) @ w (O, K).T + bias; float32, or int8 with int32 / shifted-and-clipped int8 out (as cpu.dense)."""
    x, w, bias, integer = dense_operands(x, w, bias, operand)
    requant = checks.int8_requant(shift, clip, integer, "dense", OP)
    batch, outputs = x.shape[0], w.shape[0]
    tile = choose_tile(outputs, batch)
    spec = DenseSpec(batch, x.shape[1], outputs, integer, bias is not None, requant, tile)
    kernel = make_kernel(OP, spec, gemm_launch(tile, outputs, batch, 1), ["x", "w", "bias", "y"], [], _emit_dense)
    call = Call(OP, [x, w, bias], gpu)
    y = call.empty((batch, outputs), checks.result_dtype(integer, requant))
    call.launch(kernel, call.device(x), call.device(w), call.device(bias) if bias is not None else y, y)
    return call.result(y)
