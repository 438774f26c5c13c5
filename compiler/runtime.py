"""Runtime: tensor layouts, placing a compiled operator in a device's DRAM, running it.

Layouts: activations NCHW -> NCHW{batch}n{block}c, i.e. (N/b, C/block, H, W, b,
block); weights OIHW -> OIHW{block_out}o{block_in}i, i.e. (O/bo, I/bi, KH, KW, bo,
bi); bias (O,) -> (O/bo, b, bo) int32 repeated over the batch rows.  Channel and
batch counts that are not multiples of the block are zero-padded here and the
padding is dropped again on the way out.
"""

from __future__ import annotations

import numpy as np

from vtakit.errors import CompileError, DeviceError
from vtakit.compiler.codegen import CompiledOp
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import encode_uops
from vtakit.isa.layout import INSN_BYTES
from vtakit.sim.device import Device, SimDevice
from vtakit.sim.stats import RunStats


def _ceil(n: int, b: int) -> int:
    return -(-n // b)


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(N, C, H, W) -> (N/b, C/block, H, W, b, block), zero-padded."""
    n, c, h, w = x.shape
    nb, cb = _ceil(n, batch), _ceil(c, block)
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
    ob, ib = _ceil(o, block_out), _ceil(i, block_in)
    padded = np.zeros((ob * block_out, ib * block_in, kh, kw), dtype=wt.dtype)
    padded[:o, :i] = wt
    return np.ascontiguousarray(padded.reshape(ob, block_out, ib, block_in, kh, kw).transpose(0, 2, 4, 5, 1, 3))


def pack_bias(bias: np.ndarray, batch: int, block_out: int) -> np.ndarray:
    """(O,) int32 -> (O/bo, b, bo), the same bias for every batch row."""
    ob = _ceil(len(bias), block_out)
    padded = np.zeros(ob * block_out, dtype=np.int32)
    padded[:len(bias)] = bias
    return np.ascontiguousarray(np.broadcast_to(padded.reshape(ob, 1, block_out), (ob, batch, block_out)))


def resolve_device(device, cfg: HwConfig) -> Device:
    """ "fsim" (functional), "sim" (cycle) or any Device built for `cfg`."""
    if isinstance(device, str):
        if device in ("fsim", "functional"):
            return SimDevice(cfg, model="functional")
        if device in ("sim", "cycle"):
            return SimDevice(cfg, model="cycle")
        raise DeviceError(f"unknown device {device!r}; use 'fsim', 'sim' or a Device object")
    if not isinstance(device, Device):
        raise DeviceError(f"{device!r} is not a Device (config, dram, alloc, run)")
    if device.config != cfg:
        raise DeviceError(f"the device is configured as {device.config.label}, the operator for {cfg.label}")
    return device


def run_compiled(op: CompiledOp, device: Device, inputs: dict[str, np.ndarray],
                 timeout_s: float | None = None) -> tuple[np.ndarray, RunStats]:
    """Place tensors, instructions and micro-ops in the device's DRAM, run, read the output back.

    `inputs` maps tensor names to arrays already in the packed layout; returns the
    output in its packed layout (int32 for byte-plane outputs)."""
    cfg = op.cfg
    bases: dict[str, int] = {}
    for name, spec in op.tensors.items():
        nbytes = max(spec.nbytes(cfg), 1)
        addr = device.alloc(nbytes, 4096)
        bases[name] = addr
        if name == "uops":
            data = np.frombuffer(encode_uops(op.uop_table, cfg), dtype=np.uint8)
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
        device.dram[addr:addr + data.size] = data
    code = op.link(bases)
    insn_addr = device.alloc(len(code), 4096)
    device.dram[insn_addr:insn_addr + len(code)] = np.frombuffer(code, dtype=np.uint8)
    stats = device.run(insn_addr, len(code) // INSN_BYTES, timeout_s=timeout_s)
    spec = op.tensors[op.output]
    raw = device.dram[bases[op.output]:bases[op.output] + spec.nbytes(cfg)].copy()
    lanes = (cfg.batch, cfg.block_out)
    planes = raw.view(np.int8).reshape((spec.planes,) + spec.shape + lanes)
    if spec.planes == 1:
        return planes[0], stats
    word = np.zeros(planes.shape[1:], dtype=np.uint32)
    for p in range(spec.planes):
        word |= planes[p].view(np.uint8).astype(np.uint32) << np.uint32(8 * p)
    return word.view(np.int32), stats
