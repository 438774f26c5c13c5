"""The compiled module: what `vtakit compile` writes and `vtakit run` executes.

A module holds the quantized (or, for `target="cpu"` and `"cuda"`, float) graph
that the host executes (on the CPU, or on the GPU when `host == "cuda"`), the
accelerator tasks (relocatable programs and their bindings), the packed constants
and the static DRAM plan.  On disk it is one `.vtamod` file, a numpy `.npz`
archive: a JSON manifest plus named arrays, nothing pickled.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.devices import HOST, device_entry, register_device
from vtakit.errors import CompileError, DeviceError, pc_side_missing
from vtakit.compiler.ir import Graph, TensorInfo
from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.cpu import aot
from vtakit.compiler.backends.vta.runtime import resolve_device
from vtakit.compiler.passes.lower import VtaTask
from vtakit.compiler.module.container import FORMAT, VERSION, read_module, write_module  # noqa: F401
from vtakit.compiler.module import check
from vtakit.compiler.module.dram_plan import DramPlan
from vtakit.compiler.module.notes import CompileNotes
from vtakit.compiler.module.packed_host import packed_nodes
from vtakit.compiler.module.report import ModuleReport
from vtakit.compiler.options import HOSTS
from vtakit.compiler.ops.execute import check_feeds
from vtakit.compiler.module.runner import Binding, RunResult, bind, check_finite, run_module
from vtakit.isa.config import HwConfig

try:
    from vtakit.compiler.backends import cuda
except ImportError as missing:  # a board's runtime: no llvmlite, so no PTX; the CPU host runs
    cuda = None
    _NO_GPU = pc_side_missing(missing)


@dataclass
class CompiledModule:
    config: HwConfig
    target: str  # "vta", "cpu" or "cuda"
    graph: Graph
    tasks: list  # VtaTask, or the name of a node the host runs
    consts: dict[str, np.ndarray] = field(default_factory=dict)  # packed constants, micro-ops (uint8)
    plan: DramPlan = field(default_factory=DramPlan)
    notes: CompileNotes = field(default_factory=CompileNotes)  # what the compile reported (module/notes.py)
    host: str = "cpu"  # where host tasks run: "cpu" or "cuda" (the GPU kernels are listed in notes.gpu)
    last_run: RunResult | None = None
    last_host_kernels: str = ""  # which CPU host kernels the last run used (cpu.implementation; "" on a GPU)
    host_libraries: dict[str, np.ndarray] = field(default_factory=dict)  # target -> prebuilt kernels (aot.py)
    _bindings: dict[int, Binding] = field(default_factory=dict, repr=False)
    _gpu_kernels: dict[int, Any] = field(default_factory=dict, repr=False)
    _tiles: dict[str, int] | None = field(default=None, repr=False)

    def host_nodes_on_tiles(self) -> dict[str, int]:
        """The host nodes that run on the accelerator's packed tiles (packed_host.packed_nodes): a property of
        the graph and the tasks, worked out on the first run rather than on every one."""
        if self._tiles is None:
            self._tiles = packed_nodes(self.graph, self.tasks)
        return self._tiles

    # ------------------------------------------------------------- queries
    @property
    def inputs(self) -> dict[str, TensorInfo]:
        return {n: self.graph.tensors[n] for n in self.graph.inputs}

    @property
    def outputs(self) -> dict[str, TensorInfo]:
        return {n: self.graph.tensors[n] for n in self.graph.outputs}

    def vta_tasks(self) -> list[VtaTask]:
        return [t for t in self.tasks if isinstance(t, VtaTask)]

    # ------------------------------------------------------------- running
    def _feeds(self, inputs) -> dict[str, np.ndarray]:
        """The inputs by name, as arrays of the shapes and dtypes the module was compiled for."""
        if not isinstance(inputs, dict):
            if len(self.graph.inputs) != 1:
                raise CompileError(f"the model has inputs {self.graph.inputs}: pass a dict by input name")
            inputs = {self.graph.inputs[0]: inputs}
        feeds = {}
        for name, value in inputs.items():
            if not isinstance(name, str):
                raise CompileError(f"inputs are named by strings, got {type(name).__name__} {str(name)[:40]!r} "
                                   f"(inputs: {self.graph.inputs})")
            try:
                feeds[name] = np.asarray(value)
            except (ValueError, TypeError):
                raise CompileError(f"input {name!r} is not an array of numbers") from None
        return check_feeds(self.graph, feeds)

    def _device(self, device):
        if (isinstance(device, str) and device_entry(device).kind == HOST) or self.target in HOSTS:
            return None
        if not isinstance(device, str) and getattr(device, "config", None) != self.config:
            label = getattr(getattr(device, "config", None), "label", "?")
            raise DeviceError(f"this module was compiled for {self.config.label}, the device is configured as "
                              f"{label}; recompile with --config {label}")
        return resolve_device(device, self.config)

    def bind(self, device) -> Binding:
        """Load the module on a device (once): constants, micro-ops and linked instructions."""
        key = id(device)
        if key not in self._bindings or self._bindings[key].device is not device:
            self._bindings[key] = bind(self, device)
        return self._bindings[key]

    def _host_kernels(self, device, host):
        """The host backend: compiler.backends.cpu, or GpuKernels on the GPU (`host` overrides the module's choice)."""
        if host is None:
            on_device = device if isinstance(device, str) and device in HOSTS else None
            host = on_device or self.host
        if isinstance(host, str) and host not in HOSTS:
            raise DeviceError(f"unknown host {host!r}; use cpu, cuda or a GPU backend object")
        if host == "cpu":
            return cpu
        if cuda is None:
            raise DeviceError(f"the GPU host needs llvmlite ({_NO_GPU} is not installed: a board's runtime)")
        if host == "cuda":
            try:
                host = cuda.default_gpu()
            except DeviceError as exc:
                raise DeviceError(f"cannot run on the GPU: {exc}") from None
        if id(host) not in self._gpu_kernels or self._gpu_kernels[id(host)].backend is not host:
            self._gpu_kernels[id(host)] = cuda.GpuKernels(host, self.graph.consts.values())
        return self._gpu_kernels[id(host)]

    def run(self, inputs, device="sim", timeout_s: float | None = None, host=None,
            strict: bool = False) -> dict[str, np.ndarray]:
        """Outputs by ONNX output name for `inputs` (an array for a single-input model, or a dict by name).

        device: "fsim", "sim" (cycle model), "rtl", "cpu" (every node on the host: the bit-exact
        reference of the accelerator's arithmetic), "cuda" (every node on the GPU) or a Device built for
        this module's config.  Host tasks run where the module was compiled for (`host`, "cpu" or
        "cuda"); `host` here overrides that ("cpu", "cuda" or a GPU backend such as cuda.Emulator()).
        Inputs holding NaN or infinities give a NonFiniteInputWarning; with `strict`, a CompileError."""
        feeds = self._feeds(inputs)
        check_finite(feeds, strict)
        dev = self._device(device)
        kernels = self._host_kernels(device, host)
        binding = self.bind(dev) if dev is not None else None
        self.last_run = run_module(self, binding, feeds, timeout_s, host_only=dev is None, kernels=kernels)
        label = device if isinstance(device, str) else type(device).__name__
        gpu = getattr(kernels, "label", None)  # None: the CPU kernels
        if gpu is not None:
            label = gpu if dev is None else f"{label} (host tasks on {gpu})"
        self.last_run.device = label
        self.last_host_kernels = cpu.implementation() if kernels is cpu else ""
        return self.last_run.outputs

    def report(self):
        """Per-layer table of the last run (see compiler.module.report)."""
        if self.last_run is None:
            raise CompileError("the module has not run yet: call .run(inputs) first")
        return ModuleReport.of(self)

    def build_host_kernels(self, targets) -> dict[str, int]:
        """Compile the host part's kernels ahead of time for the named CPUs ("armv7", "aarch64", "x86_64"; a
        list or a comma-separated string) into libraries the module carries; returns kernels per target."""
        self.host_libraries.update(aot.build_libraries(self, targets))
        return {name: aot.library_kernels(data) for name, data in sorted(self.host_libraries.items())}

    # ------------------------------------------------------------- files
    def save(self, path) -> Path:
        """Write the module to `path` (a `.vtamod`), signed with this user's key (made on first use)."""
        path = Path(path)
        arrays: dict[str, np.ndarray] = {}
        for k, v in self.graph.consts.items():
            arrays[f"graph/{k}"] = v
        for k, v in self.consts.items():
            arrays[f"packed/{k}"] = v
        for k, v in self.host_libraries.items():
            arrays[f"hostlib/{k}"] = v
        tasks = []
        for t in self.tasks:
            if not isinstance(t, VtaTask):
                tasks.append({"host": t})
                continue
            p = t.program
            arrays[f"words/{t.node}"] = p.words
            for tensor, idx in p.relocs.items():
                arrays[f"relocs/{t.node}/{tensor}"] = idx
            tasks.append(dict(node=t.node, op=t.op, macs=t.macs, schedule=t.schedule, bind=t.bind,
                              acts={k: [b.tensor, b.block, b.planes, b.packing] for k, b in t.acts.items()},
                              program=dict(name=p.name, output=p.output, relocs=list(p.relocs),
                                           tensors={k: s.to_dict() for k, s in p.tensors.items()})))
        manifest = dict(config=self.config.to_dict(), target=self.target, host=self.host,
                        graph=_graph_to_dict(self.graph), tasks=tasks, plan=self.plan.to_dict(),
                        notes=_jsonable(self.notes.to_dict()), host_targets=sorted(self.host_libraries))
        write_module(path, manifest, arrays)
        return path

    @classmethod
    def load(cls, path, max_bytes: int | None = None, trust: bool = False) -> "CompiledModule":
        """A module saved by `save`, checked before anything runs: the archive's decompressed size
        (at most `max_bytes`, default container.MAX_BYTES or VTAKIT_MAX_MODULE_MB), the format
        version, the sha256 of every array, the signature with this user's key (module/signing.py;
        skipped with `trust`, for a reviewed module from elsewhere: saving it then signs it here), and
        every field against the stored config (module/check.py).  Prebuilt host kernels (native code) are
        loaded only from a module this key signed, never under `trust`.  Anything wrong is one CompileError
        line naming the file and the field."""
        manifest, arrays = read_module(path, max_bytes, trust=trust)
        libraries = {k[8:]: arrays.pop(k) for k in list(arrays) if k.startswith("hostlib/")}
        bad = [k for k, v in libraries.items() if not aot.known_target(k) or v.dtype != np.uint8 or v.ndim != 1]
        if bad or sorted(libraries) != manifest.get("host_targets", []):
            raise CompileError(f"{path}: host_targets: the host kernel libraries do not match the manifest's list")
        module = cls(**check.parse(path, manifest, arrays))
        check.check(path, module)
        module.host_libraries = libraries
        if trust and libraries:  # machine code from a file this key did not sign is never run (issue 37)
            warnings.warn(f"{path}: its prebuilt host kernels ({', '.join(sorted(libraries))}) are not loaded: "
                          f"--trust checks a module's fields, not its machine code; the host part runs on numpy "
                          f"(sign it here by saving it, or give this machine the compiling key, to use them)",
                          aot.HostKernelWarning, stacklevel=2)
        else:
            aot.use_libraries(libraries, str(path))
        return module


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(v) else "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"
    return v


def _graph_to_dict(g: Graph) -> dict:
    return dict(name=g.name, inputs=g.inputs, outputs=g.outputs,
                tensors={k: [list(t.shape), t.dtype, t.exp] for k, t in g.tensors.items()},
                nodes=[dict(op=n.op, name=n.name, inputs=n.inputs, outputs=n.outputs, attrs=_jsonable(n.attrs))
                       for n in g.nodes],
                notes=_jsonable(g.notes))


def _register_hosts() -> None:
    register_device("cpu", None, kind=HOST, counts_cycles=False,
                    description="every node on the host CPU (the bit-exact reference of the accelerator)")
    register_device("cuda", None, kind=HOST, counts_cycles=False, description="every node on the GPU")


_register_hosts()

