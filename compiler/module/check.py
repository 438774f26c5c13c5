"""Validation of a module read from a file: every field, against the stored config, before any run.

The content hashes (`container`) catch damage and careless edits, but whoever edits a module can
recompute them, so what a module says is checked on its own: the stored config is a valid one; the
graph is well formed and every node's output shapes follow from its inputs (the op's own shape
rule); tasks follow the graph's order; every program decodes under the config and each of its DRAM
accesses lies inside the buffer its relocation names; packed constants have the sizes their tensor
specs give under the config; and the DRAM plan is the one the compiler would make for these tasks.
Any mismatch is one CompileError naming the field, raised before a device is touched.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from vtakit.errors import CompileError, ConfigError, IsaError, VtaError
from vtakit.compiler.ir import Graph, Node, TensorInfo
from vtakit.compiler.passes.lower import ActBuffer, VtaTask
from vtakit.compiler.options import HOSTS, TARGETS
from vtakit.compiler.module.dram_plan import DramPlan, liveness, plan_dram
from vtakit.compiler.module.notes import CompileNotes
from vtakit.compiler.backends.vta.graph_ops import lowering_rule
from vtakit.compiler.backends.vta.packing import ReductionPacking
from vtakit.compiler.backends.vta.program import Program, TensorSpec
from vtakit.compiler.backends.vta.runtime import WEIGHT_OPERAND, act_nchw
from vtakit.compiler.ops.shapes import infer
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import decode_columns, decode_program
from vtakit.isa.fields import INSN_BYTES, mem_layout
from vtakit.isa.opcodes import MemId, Opcode

MAX_DIM = 1 << 31
MAX_RANK = 8
MAX_BUFFER = 1 << 40


class _Invalid(Exception):
    """A field that reads fine but says something impossible; its message says what."""


@contextmanager
def field(path, where: str) -> Iterator[None]:
    """Any stray exception while reading `where` becomes one CompileError naming it."""
    try:
        yield
    except _Invalid as e:
        raise CompileError(f"{path}: {where}: {e}") from None
    except VtaError as e:
        if isinstance(e, CompileError) and str(e).startswith(f"{path}:"):
            raise
        raise CompileError(f"{path}: {where}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, RecursionError) as e:
        raise CompileError(f"{path}: {where}: malformed ({type(e).__name__}: {e})") from None


def _fail(path, where: str, message: str) -> CompileError:
    return CompileError(f"{path}: {where}: {message}")


def _int(v: Any, what: str, lo: int = 0, hi: int = 1 << 62) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _Invalid(f"{what} must be an integer in [{lo}, {hi}], got {str(v)[:40]!r}")
    return v


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise _Invalid(f"{what} must be a string, got {type(v).__name__}")
    return v


def _strs(v: Any, what: str) -> list[str]:
    if not isinstance(v, list):
        raise _Invalid(f"{what} must be a list")
    return [_str(x, what) for x in v]


def _dict(v: Any, what: str) -> dict:
    if not isinstance(v, dict):
        raise _Invalid(f"{what} must be an object")
    return v


def _shape(v: Any, what: str, lo: int = 0) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) > MAX_RANK:
        raise _Invalid(f"{what} must be a list of at most {MAX_RANK} sizes")
    return tuple(_int(d, what, lo, MAX_DIM) for d in v)


def _dtype(v: Any) -> str:
    dt = np.dtype(_str(v, "dtype"))
    if dt.kind not in "biuf" or dt.name != v:
        raise _Invalid(f"unsupported dtype {v!r}")
    return v


def _unjson(v):
    if v in ("inf", "-inf"):
        return float(v)
    if isinstance(v, list):
        return tuple(_unjson(x) for x in v)
    if isinstance(v, dict):
        return {k: _unjson(x) for k, x in v.items()}
    return v


# ------------------------------------------------------------------ parsing
def parse(path, manifest: dict, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The CompiledModule fields of a manifest, each of the right type (no meaning checked yet)."""
    with field(path, "config"):
        try:
            cfg = HwConfig.from_dict(manifest["config"])
        except ConfigError as e:
            raise _fail(path, "stored config", str(e)) from None
    with field(path, "target"):
        target, host = manifest["target"], manifest.get("host", "cpu")
        if target not in TARGETS or host not in HOSTS:
            raise _Invalid(f"target {str(target)[:20]!r} / host {str(host)[:20]!r}")
    with field(path, "graph"):
        graph = _graph(manifest["graph"], {k[6:]: v for k, v in arrays.items() if k.startswith("graph/")})
    tasks: list = []
    with field(path, "tasks"):
        listed = manifest["tasks"]
        if not isinstance(listed, list):
            raise _Invalid("must be a list")
    for i, t in enumerate(listed):
        with field(path, f"task {i}"):
            tasks.append(_task(_dict(t, "a task"), arrays))
    with field(path, "plan"):
        plan = _plan(_dict(manifest["plan"], "plan"))
    with field(path, "notes"):
        notes = CompileNotes.from_dict(manifest.get("notes", {}))
    consts = {k[7:]: v for k, v in arrays.items() if k.startswith("packed/")}
    known = ("graph/", "packed/", "words/", "relocs/")
    stray = [k for k in arrays if not k.startswith(known)]
    if stray:
        raise _fail(path, "arrays", f"unknown array {stray[0][:80]!r}")
    return dict(config=cfg, target=target, graph=graph, tasks=tasks, consts=consts, plan=plan, notes=notes,
                host=host)


def _graph(d: Any, consts: dict[str, np.ndarray]) -> Graph:
    d = _dict(d, "graph")
    tensors = {}
    for k, v in _dict(d["tensors"], "tensors").items():
        if not isinstance(v, list) or len(v) != 3:
            raise _Invalid(f"tensor {k!r} must be [shape, dtype, exp]")
        shape, dt, exp = v
        tensors[k] = TensorInfo(_shape(shape, f"tensor {k!r} shape"), _dtype(dt),
                                None if exp is None else _int(exp, f"tensor {k!r} exp", -64, 64))
    nodes = []
    if not isinstance(d["nodes"], list):
        raise _Invalid("nodes must be a list")
    for n in d["nodes"]:
        n = _dict(n, "a node")
        nodes.append(Node(_str(n["op"], "op"), _str(n["name"], "name"), _strs(n["inputs"], "node inputs"),
                          _strs(n["outputs"], "node outputs"), _unjson(_dict(n["attrs"], "attrs"))))
    return Graph(nodes, tensors, _strs(d["inputs"], "inputs"), _strs(d["outputs"], "outputs"), consts,
                 _str(d["name"], "name"), _dict(d.get("notes", {}), "notes"))


def _task(t: dict, arrays: dict[str, np.ndarray]):
    if "host" in t:
        return _str(t["host"], "host task")
    p = _dict(t["program"], "program")
    node = _str(t["node"], "node")
    relocs = {}
    for r in _strs(p["relocs"], "relocs"):
        relocs[r] = arrays[f"relocs/{node}/{r}"]
    tensors = {}
    for k, s in _dict(p["tensors"], "program tensors").items():
        s = _dict(s, "tensor spec")
        tensors[k] = TensorSpec(_str(s["name"], "name"), _shape(s["shape"], f"tensor {k!r} shape", 1),
                                MemId(_int(s["mem"], "mem", 0, 7)), _int(s["planes"], "planes", 1, 8))
    program = Program(_str(p["name"], "program name"), arrays[f"words/{node}"], relocs, tensors,
                      arrays[f"packed/uops:{node}"], _str(p["output"], "program output"))
    acts = {}
    for k, v in _dict(t["acts"], "acts").items():
        if not isinstance(v, list) or len(v) != 4:
            raise _Invalid(f"act {k!r} must be [tensor, block, planes, packing]")
        acts[k] = ActBuffer(_str(v[0], "act tensor"), _int(v[1], "block", 1, 1 << 16), _int(v[2], "planes", 1, 8),
                            _str(v[3], "packing"))
    bind = {_str(k, "bind"): _str(v, "bind") for k, v in _dict(t["bind"], "bind").items()}
    schedule = t["schedule"]
    if schedule is not None:
        _dict(schedule, "schedule")
    return VtaTask(node, _str(t["op"], "op"), program, bind, acts, _int(t["macs"], "macs"), schedule)


def _plan(d: dict) -> DramPlan:
    slots = {}
    for k, v in _dict(d["slots"], "slots").items():
        if not isinstance(v, list) or len(v) != 2:
            raise _Invalid(f"slot {k!r} must be [offset, bytes]")
        slots[k] = (_int(v[0], f"slot {k!r} offset"), _int(v[1], f"slot {k!r} bytes"))
    return DramPlan(slots, _int(d["const_bytes"], "const_bytes"), _int(d["arena_bytes"], "arena_bytes"),
                    _int(d["activation_bytes_without_reuse"], "activation_bytes_without_reuse"))


# --------------------------------------------------------------- meaning
def check(path, module) -> None:
    """Raise one CompileError for the first field of `module` that does not hold together."""
    g = module.graph
    check_graph(path, g)
    names = [t.node if isinstance(t, VtaTask) else t for t in module.tasks]
    if names != [n.name for n in g.nodes]:
        raise _fail(path, "tasks", "the tasks are not the graph's nodes in order")
    vta = module.vta_tasks()
    if module.target in HOSTS and (vta or module.consts or module.plan.slots):
        raise _fail(path, "tasks", f"a {module.target} module holds accelerator tasks or buffers")
    for t in vta:
        with field(path, f"task {t.node!r}"):
            _check_task(path, module, t)
    with field(path, "plan"):
        _check_plan(path, module)
    for t in vta:
        with field(path, f"task {t.node!r}"):
            _check_program(path, module, t)


def check_graph(path, g: Graph) -> None:
    """Names resolve, nodes come in an order that can run, and every shape follows from the inputs."""
    if len(set(g.inputs)) != len(g.inputs) or not g.outputs:
        raise _fail(path, "graph", "repeated inputs or no outputs")
    for name, c in g.consts.items():
        info = g.tensors.get(name)
        if info is None or tuple(c.shape) != info.shape or c.dtype != np.dtype(info.dtype):
            raise _fail(path, f"graph constant {name!r}", "its array does not match its tensor entry")
    ready = set(g.consts)
    for name in g.inputs:
        if name not in g.tensors or name in ready:
            raise _fail(path, f"graph input {name!r}", "not a tensor of the graph, or a constant")
        ready.add(name)
    seen: set[str] = set()
    for n in g.nodes:
        where = f"node {n.name!r} ({n.op[:40]})"
        if n.name in seen or not n.outputs:
            raise _fail(path, where, "a repeated name, or no outputs")
        seen.add(n.name)
        missing = [t for t in n.inputs if t and t not in ready]
        if missing:
            raise _fail(path, where, f"input {missing[0][:80]!r} is not computed before it")
        for t in n.outputs:
            if t not in g.tensors or t in ready:
                raise _fail(path, where, f"output {t[:80]!r} is unknown or computed twice")
        with field(path, where):
            infos = infer(n, g)
            if len(infos) < len(n.outputs):
                raise _Invalid("fewer outputs than the node lists")
            for t, info in zip(n.outputs, infos):
                have = g.tensors[t]
                if tuple(info.shape) != have.shape:  # (dtypes: quantization sets them after the shape rules)
                    raise _fail(path, where, f"output {t[:80]!r} has shape {have.shape}, its inputs make it "
                                             f"{tuple(info.shape)}")
        ready.update(n.outputs)
    missing = [t for t in g.outputs if t not in ready]
    if missing:
        raise _fail(path, "graph", f"output {missing[0][:80]!r} is never computed")


def _check_task(path, module, t: VtaTask) -> None:
    cfg, p = module.config, t.program
    node = module.graph.node(t.node)
    if t.op != node.op or lowering_rule(node) is None:
        raise _Invalid(f"op {t.op[:40]!r} is not the node's accelerator op {node.op!r}")
    if p.output not in t.acts or set(t.bind) != set(p.tensors) or not set(t.acts) <= set(p.tensors):
        raise _Invalid("the bindings do not match the program's tensors")
    for name, spec in p.tensors.items():
        key = t.bind[name]
        if not 0 < math.prod(spec.shape) * spec.planes * cfg.elem_bytes(spec.mem) <= MAX_BUFFER:
            raise _Invalid(f"tensor {name!r} of shape {spec.shape} is empty or larger than {MAX_BUFFER} bytes")
        if name in t.acts:
            buf = t.acts[name]
            if buf.key != key:
                raise _Invalid(f"activation {name!r} is bound to {key[:80]!r}, its buffer is {buf.key[:80]!r}")
            if buf.block not in (cfg.block_in, cfg.block_out) or buf.planes not in (1, 4):
                raise _Invalid(f"activation {name!r} ({key[:80]}) does not fit the config's blocks")
            if buf.packing and buf.packing != WEIGHT_OPERAND:
                ReductionPacking.from_spec(buf.packing)
            wanted = node.outputs[:1] if name == p.output else node.inputs
            if buf.tensor not in wanted:
                raise _Invalid(f"activation {name!r} is tensor {buf.tensor[:80]!r}, not one of the node's")
        elif key not in module.consts:
            raise _Invalid(f"tensor {name!r} is bound to {key[:80]!r}, which the module does not hold")
        else:
            data = module.consts[key]
            if data.dtype != np.uint8 or data.ndim != 1 or data.size != spec.nbytes(cfg):
                raise _Invalid(f"constant {key[:80]!r} holds {data.size} bytes, its tensor spec "
                                 f"{spec.nbytes(cfg)} under the config")
    if t.bind.get("uops") != f"uops:{t.node}" or module.consts[f"uops:{t.node}"] is not p.uops:
        raise _Invalid("the micro-ops are not bound to the task's table")
    words = p.words
    if words.dtype != np.uint64 or words.ndim != 2 or words.shape[1] != 2 or len(words) == 0:
        raise _Invalid(f"instructions must be an (n, 2) uint64 array, got {words.dtype} {words.shape}")
    owner = np.full(len(words), -1)
    for k, (name, idx) in enumerate(p.relocs.items()):
        if name not in p.tensors or idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise _Invalid(f"relocation {name[:80]!r} must be a 1-D integer array of a program tensor")
        if idx.size and (idx.min() < 0 or idx.max() >= len(words)):
            raise _Invalid(f"relocation {name!r} indexes outside the {len(words)} instructions")
        if np.any(owner[idx] != -1) or len(np.unique(idx)) != idx.size:
            raise _Invalid(f"relocation {name!r} repeats an instruction")
        owner[idx] = k


def _check_plan(path, module) -> None:
    """The stored plan must be the one the compiler makes for these buffers (same order of constants)."""
    plan, vta = module.plan, module.vta_tasks()
    if module.target in HOSTS:
        return
    code = {f"code:{t.node}": t.program.instructions * INSN_BYTES for t in vta}
    fixed_keys = [k for k in plan.slots if not k.startswith("act:")]
    if set(fixed_keys) != set(module.consts) | set(code) or len(code) != len(vta):
        raise _Invalid("its constant and code buffers are not the module's")
    fixed = {k: module.consts[k].size if k in module.consts else code[k] for k in fixed_keys}
    want = plan_dram(module.config, fixed, liveness(module.config, module.tasks, module.graph))
    if want != plan:
        odd = [k for k in set(want.slots) | set(plan.slots) if want.slots.get(k) != plan.slots.get(k)]
        raise _Invalid(f"not the plan these buffers make under the config (first difference: "
                         f"{(sorted(odd) or ['sizes'])[0][:80]})")


def _check_program(path, module, t: VtaTask) -> None:
    """Every instruction decodes under the config; every LOAD/STORE is relocated to one tensor, of its
    memory type, reads or writes only inside that tensor's buffer, and stays inside its on-chip buffer."""
    cfg, p = module.config, t.program
    try:
        insns = decode_program(p.words.astype("<u8").tobytes(), cfg)
    except IsaError as e:
        raise _Invalid(f"its program does not decode under the config: {e}") from None
    m = decode_columns(p.words, mem_layout(cfg))
    op = m["opcode"]
    tensor_of = {}
    for name, idx in p.relocs.items():
        for i in idx.tolist():
            tensor_of[i] = name
    for i in np.flatnonzero((op == Opcode.LOAD) | (op == Opcode.STORE)).tolist():
        if i not in tensor_of:
            raise _Invalid(f"instruction {i} ({insns[i].mnemonic}) addresses DRAM without a relocation")
        name = tensor_of[i]
        spec = p.tensors[name]
        eb = cfg.elem_bytes(int(m["mem_id"][i]))
        if eb != cfg.elem_bytes(spec.mem):
            raise _Invalid(f"instruction {i} ({insns[i].mnemonic}) addresses tensor {name!r} of another memory type")
        y, x, stride = int(m["y_size"][i]), int(m["x_size"][i]), int(m["x_stride"][i])
        end = 0 if x == 0 or y == 0 else (int(m["dram_base"][i]) + (y - 1) * stride + x) * eb
        size = module.plan.slots[t.bind[name]][1]
        if end > size:
            raise _Invalid(f"instruction {i} ({insns[i].mnemonic}) reaches byte {end} of tensor {name!r}, "
                           f"whose buffer holds {size}")
        if op[i] == Opcode.LOAD:  # on chip, counted as sim.machine counts it (the RTL does not check)
            pads = [int(m[f][i]) for f in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")]
            entries = 0 if x == 0 else (y + pads[0] + pads[1]) * (x + pads[2] + pads[3])
        else:
            entries = y * x
        depth = cfg.depth(int(m["mem_id"][i]))
        if entries and int(m["sram_base"][i]) + entries > depth:
            raise _Invalid(f"instruction {i} ({insns[i].mnemonic}) reaches on-chip entry "
                           f"{int(m['sram_base'][i]) + entries}, beyond the {depth} of its buffer")
    for name, buf in t.acts.items():  # the host packs and unpacks these: runner._write_act, _read_act
        shape = module.graph.tensors[buf.tensor].shape
        if not buf.packing and _packed_bytes(cfg, buf, shape) != module.plan.slots[buf.key][1]:
            raise _Invalid(f"activation {name!r} ({buf.key[:80]}) does not hold tensor {buf.tensor[:80]!r} of "
                           f"shape {shape}")
    for i in sorted(set(tensor_of)):
        if op[i] not in (Opcode.LOAD, Opcode.STORE):
            raise _Invalid(f"relocation of tensor {tensor_of[i]!r} points at instruction {i} ({insns[i].mnemonic})")


def _packed_bytes(cfg: HwConfig, buf: ActBuffer, shape: tuple[int, ...]) -> int:
    """Bytes of `shape` packed as the runner packs it (NCHW{batch}n{block}c, `planes` byte planes)."""
    n, c, h, w = act_nchw(shape)
    return -(-n // cfg.batch) * -(-c // buf.block) * h * w * cfg.batch * buf.block * buf.planes
