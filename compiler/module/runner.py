"""Running a compiled module: accelerator tasks on a Device, host tasks on the CPU or GPU kernels.

Loading binds the module to a device once: one arena is allocated, constants and
micro-ops are written and every task's instructions are linked at their planned
addresses.  A run then walks the tasks in order.  Activations move between the
host and DRAM only at the borders: a host task that reads an accelerator result
unpacks it from DRAM, an accelerator task that reads a host result gets it
packed into its planned buffer just before it runs.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from vtakit.errors import CompileError, DeviceError, VtaError
from vtakit.compiler.backends import cpu
from vtakit.compiler.ops.execute import check_feeds, run_node
from vtakit.compiler.passes.lower import ActBuffer, VtaTask
from vtakit.compiler.module.packed_host import tile_constant
from vtakit.compiler.backends.vta.packing import ReductionPacking
from vtakit.compiler.backends.vta.runtime import WEIGHT_OPERAND, act_nchw, from_nchw, join_planes, pack_weight, to_nchw
from vtakit.isa.fields import INSN_BYTES
from vtakit.sim.stats import RunStats
from vtakit.isa.arith import ceil_div


@dataclass
class TaskTiming:
    node: str
    op: str
    place: str  # "vta" or "host"
    cycles: int | None = None
    seconds: float = 0.0
    macs: int = 0
    bytes_moved: int = 0
    stats: RunStats | None = None
    kernel_seconds: float = 0.0  # spent compiling or loading host kernels on first use, left out of `seconds`


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    tasks: list[TaskTiming] = field(default_factory=list)
    border_transfers: int = 0  # crossings: activations the host unpacks from or packs into DRAM (a tile a host
    # activation reads and writes back in its own packed layout counts once: packed_host.py)
    device: str = ""

    @property
    def accelerator_cycles(self) -> int:
        return sum(t.cycles or 0 for t in self.tasks if t.place == "vta")

    @property
    def kernel_seconds(self) -> float:
        """What this run spent compiling or loading host kernels (a first run's cost; never run time)."""
        return sum(t.kernel_seconds for t in self.tasks)

    @property
    def host_segments(self) -> int:
        """Runs of consecutive host tasks (each between accelerator tasks is one stop of the accelerator)."""
        return sum(t.place != "vta" and (i == 0 or self.tasks[i - 1].place == "vta") for i, t in enumerate(self.tasks))


@dataclass
class Binding:
    """A module loaded on one device: where its arena starts and the linked code of every task."""

    device: object
    base: int
    code: dict[str, tuple[int, int]]  # node -> (instruction address, count)


class NonFiniteInputWarning(UserWarning):
    """An input holds NaN or infinite values: the int8 network quantizes them to arbitrary codes."""


def check_finite(feeds: dict[str, np.ndarray], strict: bool = False) -> None:
    """Warn (with `strict`, raise a CompileError) for each float input holding NaN or infinities:
    quantization maps them to arbitrary int8 values, so the outputs would mean nothing."""
    for name, v in feeds.items():
        if v.dtype.kind != "f" or np.isfinite(v).all():
            continue
        nan = int(np.isnan(v).sum())
        inf = int(v.size - nan - np.isfinite(v).sum())
        message = (f"input {name!r} holds {nan} NaN and {inf} infinite values (of {v.size}); "
                   f"the outputs are not meaningful")
        if strict:
            raise CompileError(message)
        warnings.warn(message, NonFiniteInputWarning, stacklevel=3)


def bind(module, device) -> Binding:
    plan = module.plan
    base = device.alloc(plan.arena_bytes, 4096)
    dram = device.dram
    for key, data in module.consts.items():
        off, size = plan.slots[key]
        dram[base + off:base + off + size] = data
    code = {}
    for task in module.vta_tasks():
        bases = {t: base + plan.slots[key][0] for t, key in task.bind.items()}
        linked = task.program.link(module.config, bases)
        off, size = plan.slots[f"code:{task.node}"]
        dram[base + off:base + off + size] = np.frombuffer(linked, np.uint8)
        code[task.node] = (base + off, len(linked) // INSN_BYTES)
    return Binding(device, base, code)


def _read_packed(module, b: Binding, buf: ActBuffer, shape: tuple[int, ...]) -> np.ndarray:
    """An activation's tile as it lies in DRAM, (N/batch, C/block, H, W, batch, block), a copy."""
    cfg = module.config
    off, size = module.plan.slots[buf.key]
    raw = b.device.dram[b.base + off:b.base + off + size]
    n, c, h, w = act_nchw(shape)
    packed_shape = (ceil_div(n, cfg.batch), ceil_div(c, buf.block), h, w, cfg.batch, buf.block)
    return np.array(join_planes(raw, buf.planes, packed_shape))


def _read_act(module, b: Binding, buf: ActBuffer, shape: tuple[int, ...]) -> np.ndarray:
    n, c, _, _ = act_nchw(shape)
    return from_nchw(cpu.unpack_activation(_read_packed(module, b, buf, shape), n, c), shape)


def _write_packed(module, b: Binding, buf: ActBuffer, packed: np.ndarray) -> None:
    off, size = module.plan.slots[buf.key]
    data = np.ascontiguousarray(packed).view(np.uint8).reshape(-1)
    if data.size != size:
        raise DeviceError(f"packed {buf.tensor} has {data.size} bytes, its buffer {size}")
    b.device.dram[b.base + off:b.base + off + size] = data


def _write_act(module, b: Binding, buf: ActBuffer, value: np.ndarray) -> None:
    cfg = module.config
    if buf.packing == WEIGHT_OPERAND:  # an activation the GEMM reads as its weights (attention's K or V)
        _write_packed(module, b, buf, pack_weight(value.reshape(value.shape + (1, 1)), cfg.block_out, cfg.block_in))
        return
    v4 = to_nchw(value)
    if buf.packing:   # the conv reading it runs on a host-side im2col / space-to-depth of it
        v4 = ReductionPacking.from_spec(buf.packing).input(v4)
    _write_packed(module, b, buf, cpu.pack_activation(np.ascontiguousarray(v4), cfg.batch, buf.block))


def _host_array(value) -> np.ndarray:
    """A host copy of a value a GPU host task left on the device (numpy passes through)."""
    return value if isinstance(value, np.ndarray) else value.numpy()


def run_module(module, b: Binding | None, inputs: dict[str, np.ndarray], timeout_s: float | None = None,
               host_only: bool = False, kernels=cpu) -> RunResult:
    """Execute every task; `host_only` runs the accelerator's nodes on the host kernels instead
    (the bit-exact reference of what the accelerator computes).  `kernels` is the host backend:
    compiler.backends.cpu or a cuda.GpuKernels, whose results stay on the GPU until a border or an output."""
    g = module.graph
    env: dict[str, np.ndarray] = dict(g.consts)
    env.update(check_feeds(g, inputs))
    in_dram: dict[str, ActBuffer] = {}  # tensors whose current value lives in DRAM
    written: set[str] = set()  # buffer keys that hold their tensor's current value
    result = RunResult({})
    nodes = {n.name: n for n in g.nodes}
    on_tiles = module.host_nodes_on_tiles() if b is not None and not host_only and kernels is cpu else {}
    tiles: dict[str, np.ndarray] = {}  # tensors held in the accelerator's packed layout (packed_host.py)

    def host_value(t: str) -> np.ndarray:
        if t not in env:
            env[t] = _read_act(module, b, in_dram[t], g.tensors[t].shape)
            result.border_transfers += 1
        return env[t]

    def tile(t: str, node) -> np.ndarray:
        """An operand of a node that runs on packed tiles: a constant laid out as its tiles, a tile made on
        the host, or an accelerator result read as it lies in DRAM (the one crossing of the round trip)."""
        if g.is_const(t):
            return tile_constant(env[t], g.tensors[node.outputs[0]].shape, on_tiles[node.name])
        if t not in tiles:
            tiles[t] = _read_packed(module, b, in_dram[t], g.tensors[t].shape)
            result.border_transfers += 1
        return tiles[t]

    for task in module.tasks:
        node = nodes[task.node if isinstance(task, VtaTask) else task]
        t0 = time.perf_counter()
        found = cpu.cache_info().seconds  # kernels compiled or loaded in the task are not its run time
        if isinstance(task, VtaTask) and not host_only:
            for buf in task.inputs:
                if buf.key not in written:
                    if buf.tensor in tiles:  # back in its layout: the same crossing as its read
                        _write_packed(module, b, buf, tiles[buf.tensor])
                    else:
                        _write_act(module, b, buf, _host_array(host_value(buf.tensor)))
                        result.border_transfers += 1
                    written.add(buf.key)
            addr, count = b.code[task.node]
            stats = b.device.run(addr, count, timeout_s=timeout_s)
            out = task.output
            in_dram[out.tensor] = out
            written.add(out.key)
            loading = cpu.cache_info().seconds - found
            result.tasks.append(TaskTiming(task.node, task.op, "vta", stats.cycles,
                                           time.perf_counter() - t0 - loading, task.macs, stats.bytes_moved, stats,
                                           loading))
        else:
            on_tile = node.name in on_tiles
            try:
                value = run_node(node, [(tile(t, node) if on_tile else host_value(t)) if t else None
                                        for t in node.inputs], kernels)
            except VtaError:
                raise
            except (ArithmeticError, LookupError, TypeError, ValueError) as e:  # e.g. attributes a file forged
                raise CompileError(f"cannot run on the host ({type(e).__name__}: {e})", node=node.name,
                                   op=node.op) from None
            if kernels is not cpu:
                kernels.synchronize()  # the task's time includes its kernels
            (tiles if on_tile else env)[node.outputs[0]] = value
            loading = cpu.cache_info().seconds - found
            result.tasks.append(TaskTiming(node.name, node.op, "host", None, time.perf_counter() - t0 - loading,
                                           getattr(task, "macs", 0), kernel_seconds=loading))
    result.outputs = {o: _host_array(host_value(o)) for o in g.outputs}
    return result
