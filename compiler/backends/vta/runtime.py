"""Runtime: tensor layouts, placing a compiled operator in a device's DRAM, running it.

Layouts: activations NCHW -> NCHW{batch}n{block}c, i.e. (N/b, C/block, H, W, b,
block); weights OIHW -> OIHW{block_out}o{block_in}i, i.e. (O/bo, I/bi, KH, KW, bo,
bi); bias (O,) -> (O/bo, b, bo) int32 repeated over the batch rows.  Channel and
batch counts that are not multiples of the block are zero-padded here and the
padding is dropped again on the way out.
"""

from __future__ import annotations

import numpy as np

from vtakit.devices import open_device
from vtakit.errors import CompileError, DeviceError
from vtakit.compiler.backends.vta.codegen import CompiledOp
from vtakit.compiler.backends.vta.lowering import IDENTITY, ONES, identity_weight, ones_input
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import encode_uops
from vtakit.isa.fields import INSN_BYTES
from vtakit.isa.opcodes import MemId
from vtakit.isa.image import ProgramImage, Region
from vtakit.sim.device import Device
from vtakit.sim.stats import RunStats
from vtakit.isa.arith import ceil_div, round_up



def act_nchw(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """The 4-D (N, C, H, W) view an activation of any rank has on the accelerator, the one rule every
    packer, task and check follows: (N,) -> (N, 1, 1, 1); (M, C) -> (1, C, 1, M), a dense layer's M rows
    (tokens, or a batch) as the width of a 1 x M image, so its weights load once per output tile and serve
    every row (`to_nchw` transposes the values); (N, C, L) -> (N, C, L, 1) (a 1-D convolution runs as a
    (k, 1) one); above rank 4 the middle axes merge into H."""
    shape = tuple(int(d) for d in shape)
    if not shape:
        raise CompileError("a scalar has no accelerator layout")
    if len(shape) == 2:
        return 1, shape[1], 1, shape[0]
    if len(shape) <= 4:
        return shape + (1,) * (4 - len(shape))  # type: ignore[return-value]
    return shape[0], shape[1], int(np.prod(shape[2:-1], dtype=np.int64)), shape[-1]


WEIGHT_OPERAND = "weight"
"""The packing of an activation the accelerator reads as a GEMM's weights (an ActDense's right operand, attention's
K or V of one head): the host writes its (N, K) value in the weight layout, `pack_weight` of (N, K, 1, 1)."""


def to_nchw(value: np.ndarray) -> np.ndarray:
    """`value` in its `act_nchw` view (rows of a 2-D tensor become the width)."""
    if value.ndim == 2:
        return value.T.reshape(act_nchw(value.shape))
    return value.reshape(act_nchw(value.shape))


def from_nchw(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of `to_nchw`: an (N, C, H, W) array back in the graph tensor's `shape`."""
    if len(shape) == 2:
        return value.reshape(shape[1], shape[0]).T
    return value.reshape(shape)


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(N, C, H, W) -> (N/b, C/block, H, W, b, block), zero-padded."""
    n, c, h, w = x.shape
    nb, cb = ceil_div(n, batch), ceil_div(c, block)
    padded = np.zeros((nb * batch, cb * block, h, w), dtype=x.dtype)
    padded[:n, :c] = x
    return np.ascontiguousarray(padded.reshape(nb, batch, cb, block, h, w).transpose(0, 2, 4, 5, 1, 3))


def unpack_activation(y: np.ndarray, n: int, c: int) -> np.ndarray:
    """(N/b, C/block, H, W, b, block) -> (N, C, H, W)."""
    nb, cb, h, w, b, block = y.shape
    full = y.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * block, h, w)
    return np.ascontiguousarray(full[:n, :c])


def pack_weight(wt: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """(O, I, KH, KW) -> (O/bo, I/bi, KH, KW, bo, bi), zero-padded."""
    o, i, kh, kw = wt.shape
    ob, ib = ceil_div(o, block_out), ceil_div(i, block_in)
    padded = np.zeros((ob * block_out, ib * block_in, kh, kw), dtype=wt.dtype)
    padded[:o, :i] = wt
    return np.ascontiguousarray(padded.reshape(ob, block_out, ib, block_in, kh, kw).transpose(0, 2, 4, 5, 1, 3))


def pack_bias(bias: np.ndarray, batch: int, block_out: int) -> np.ndarray:
    """(O,) int32 -> (O/bo, b, bo), the same bias for every batch row."""
    ob = ceil_div(len(bias), block_out)
    padded = np.zeros(ob * block_out, dtype=np.int32)
    padded[:len(bias)] = bias
    return np.ascontiguousarray(np.broadcast_to(padded.reshape(ob, 1, block_out), (ob, batch, block_out)))


def resolve_device(device, cfg: HwConfig) -> Device:
    """A registered device name (vtakit.devices: "fsim", "sim", "rtl", ...) or any Device built for `cfg`."""
    if isinstance(device, str):
        return open_device(device, cfg)
    if not isinstance(device, Device):
        raise DeviceError(f"{device!r} is not a Device (config, dram, alloc, run)")
    if device.config != cfg:
        raise DeviceError(f"the device is configured as {device.config.label}, the operator for {cfg.label}")
    return device


def place(op: CompiledOp, dram: np.ndarray, alloc, inputs: dict[str, np.ndarray]) -> tuple[dict[str, int], int, int]:
    """Allocate and write every tensor, the micro-op table and the linked instructions.

    `alloc(nbytes, align)` returns byte addresses in `dram`; returns (tensor bases,
    instruction address, instruction count)."""
    cfg = op.cfg
    bases: dict[str, int] = {}
    for name, spec in op.tensors.items():
        nbytes = max(spec.nbytes(cfg), 1)
        addr = alloc(nbytes, 4096)
        bases[name] = addr
        if name == "uops":
            data = np.frombuffer(encode_uops(op.uop_table, cfg), dtype=np.uint8)
        elif name == IDENTITY:
            data = identity_weight(cfg, op.compute.residual_bits).view(np.uint8).reshape(-1)
        elif name == ONES:
            data = ones_input(cfg).view(np.uint8).reshape(-1)
        elif name == op.output:
            data = np.zeros(nbytes, dtype=np.uint8)
        else:
            if name not in inputs:
                raise CompileError(f"no data for input tensor {name!r}", op=op.name)
            arr = np.ascontiguousarray(inputs[name])
            if arr.nbytes != spec.nbytes(cfg):
                raise CompileError(f"input {name!r} has {arr.nbytes} bytes, the layout needs "
                                   f"{spec.nbytes(cfg)}", op=op.name)
            data = arr.view(np.uint8).reshape(-1)
        dram[addr:addr + data.size] = data
    code = op.link(bases)
    insn_addr = alloc(len(code), 4096)
    dram[insn_addr:insn_addr + len(code)] = np.frombuffer(code, dtype=np.uint8)
    return bases, insn_addr, len(code) // INSN_BYTES


def read_output(op: CompiledOp, dram: np.ndarray, base: int) -> np.ndarray:
    """The output in its packed layout (byte planes reassembled into int32)."""
    cfg = op.cfg
    spec = op.tensors[op.output]
    raw = dram[base:base + spec.nbytes(cfg)].copy()
    return join_planes(raw, spec.planes, spec.shape + (cfg.batch, cfg.block_out))


def join_planes(raw: np.ndarray, planes: int, shape: tuple[int, ...]) -> np.ndarray:
    """Bytes of a stored output -> int8 (one plane) or int32 (byte planes, least significant first)."""
    split = raw.view(np.int8).reshape((planes,) + tuple(shape))
    if planes == 1:
        return split[0]
    word = np.zeros(split.shape[1:], dtype=np.uint32)
    for p in range(planes):
        word |= split[p].view(np.uint8).astype(np.uint32) << np.uint32(8 * p)
    return word.view(np.int32)


def run_compiled(op: CompiledOp, device: Device, inputs: dict[str, np.ndarray],
                 timeout_s: float | None = None) -> tuple[np.ndarray, RunStats]:
    """Place the operator in the device's DRAM, run it, read the output back (packed layout)."""
    bases, insn_addr, count = place(op, device.dram, device.alloc, inputs)
    stats = device.run(insn_addr, count, timeout_s=timeout_s)
    return read_output(op, device.dram, bases[op.output]), stats


def program_image(op: CompiledOp, inputs: dict[str, np.ndarray]) -> ProgramImage:
    """A self-contained program image (what `vtakit sim` runs) with a region per tensor."""
    cfg = op.cfg
    total = sum(round_up(max(s.nbytes(cfg), 1), 4096) for s in op.tensors.values())
    total += round_up(len(op.insns) * INSN_BYTES, 4096)
    dram = np.zeros(total, dtype=np.uint8)
    top = [0]

    def alloc(nbytes: int, align: int) -> int:
        addr = round_up(top[0], align)
        top[0] = addr + nbytes
        return addr

    bases, insn_addr, count = place(op, dram, alloc, inputs)
    regions = {}
    for name, spec in op.tensors.items():
        if name == "uops":
            continue
        lanes = (cfg.batch, cfg.block_out) if spec.mem in (MemId.OUT, MemId.ACC, MemId.ACC_8BIT) else \
            ((cfg.batch, cfg.block_in) if spec.mem == MemId.INP else (cfg.block_out, cfg.block_in))
        dtype = "<i4" if spec.mem == MemId.ACC else "|i1"
        planes = (spec.planes,) if spec.planes > 1 else ()
        regions[name] = Region(bases[name], planes + spec.shape + lanes, dtype)
    return ProgramImage(cfg, dram, insn_addr, count, name=op.name, regions=regions)
