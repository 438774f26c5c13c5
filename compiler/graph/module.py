"""The compiled module: what `vtakit compile` writes and `vtakit run` executes.

A module holds the quantized (or, for `target="cpu"` and `"cuda"`, float) graph
that the host executes (on the CPU, or on the GPU when `host == "cuda"`), the
accelerator tasks (relocatable programs and their bindings), the packed constants
and the static DRAM plan.  On disk it is one `.vtamod` file, a numpy `.npz`
archive: a JSON manifest plus named arrays, nothing pickled.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.devices import HOST, device_entry, register_device
from vtakit.errors import CompileError, DeviceError
from vtakit.compiler.graph.ir import Graph, Node, TensorInfo
from vtakit.compiler.graph.lower import ActBuffer, VtaTask
from vtakit.compiler.graph.plan import DramPlan
from vtakit.compiler.graph.runner import Binding, RunResult, bind, run_module
from vtakit.compiler.vta.program import Program, TensorSpec
from vtakit.isa.config import HwConfig

FORMAT = "vtakit-module"
VERSION = 1
HOSTS = ("cpu", "cuda")


@dataclass
class CompiledModule:
    config: HwConfig
    target: str  # "vta", "cpu" or "cuda"
    graph: Graph
    tasks: list  # VtaTask, or the name of a node the host runs
    consts: dict[str, np.ndarray] = field(default_factory=dict)  # packed constants, micro-ops (uint8)
    plan: DramPlan = field(default_factory=DramPlan)
    notes: dict[str, Any] = field(default_factory=dict)
    host: str = "cpu"  # where host tasks run: "cpu" or "cuda" (the GPU kernels are listed in notes["gpu"])
    last_run: RunResult | None = None
    _bindings: dict[int, Binding] = field(default_factory=dict, repr=False)
    _gpu_kernels: dict[int, Any] = field(default_factory=dict, repr=False)

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
        if isinstance(inputs, dict):
            return inputs
        if len(self.graph.inputs) != 1:
            raise CompileError(f"the model has inputs {self.graph.inputs}: pass a dict by input name")
        return {self.graph.inputs[0]: inputs}

    def _device(self, device):
        if (isinstance(device, str) and device_entry(device).kind == HOST) or self.target in HOSTS:
            return None
        from vtakit.compiler.vta.runtime import resolve_device

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
        """The host backend: compiler.cpu, or GpuKernels on the GPU (`host` overrides the module's choice)."""
        from vtakit.compiler import cpu

        if host is None:
            on_device = device if isinstance(device, str) and device in HOSTS else None
            host = on_device or self.host
        if isinstance(host, str) and host not in HOSTS:
            raise DeviceError(f"unknown host {host!r}; use cpu, cuda or a GPU backend object")
        if host == "cpu":
            return cpu
        from vtakit.compiler import cuda

        if host == "cuda":
            try:
                host = cuda.default_gpu()
            except DeviceError as exc:
                raise DeviceError(f"cannot run on the GPU: {exc}") from None
        if id(host) not in self._gpu_kernels or self._gpu_kernels[id(host)].backend is not host:
            self._gpu_kernels[id(host)] = cuda.GpuKernels(host, self.graph.consts.values())
        return self._gpu_kernels[id(host)]

    def run(self, inputs, device="sim", timeout_s: float | None = None, host=None) -> dict[str, np.ndarray]:
        """Outputs by ONNX output name for `inputs` (an array for a single-input model, or a dict by name).

        device: "fsim", "sim" (cycle model), "rtl", "cpu" (every node on the host: the bit-exact
        reference of the accelerator's arithmetic), "cuda" (every node on the GPU) or a Device built for
        this module's config.  Host tasks run where the module was compiled for (`host`, "cpu" or
        "cuda"); `host` here overrides that ("cpu", "cuda" or a GPU backend such as cuda.Emulator())."""
        dev = self._device(device)
        feeds = self._feeds(inputs)
        kernels = self._host_kernels(device, host)
        binding = self.bind(dev) if dev is not None else None
        self.last_run = run_module(self, binding, feeds, timeout_s, host_only=dev is None, kernels=kernels)
        label = device if isinstance(device, str) else type(device).__name__
        gpu = getattr(kernels, "label", None)  # None: the CPU kernels
        if gpu is not None:
            label = gpu if dev is None else f"{label} (host tasks on {gpu})"
        self.last_run.device = label
        return self.last_run.outputs

    def report(self):
        """Per-layer table of the last run (see compiler.graph.report)."""
        from vtakit.compiler.graph.report import ModuleReport

        if self.last_run is None:
            raise CompileError("the module has not run yet: call .run(inputs) first")
        return ModuleReport.of(self)

    # ------------------------------------------------------------- files
    def save(self, path) -> Path:
        path = Path(path)
        arrays: dict[str, np.ndarray] = {}
        for k, v in self.graph.consts.items():
            arrays[f"graph/{k}"] = v
        for k, v in self.consts.items():
            arrays[f"packed/{k}"] = v
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
        manifest = dict(format=FORMAT, version=VERSION, config=self.config.to_dict(), target=self.target,
                        host=self.host, graph=_graph_to_dict(self.graph), tasks=tasks, plan=self.plan.to_dict(),
                        notes=_jsonable(self.notes))
        arrays["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
        with open(path, "wb") as f:
            np.savez(f, **{k.replace("/", "|"): v for k, v in arrays.items()})
        return path

    @classmethod
    def load(cls, path) -> "CompiledModule":
        try:
            # the file is opened here, so it is closed even when numpy cannot read it as an archive
            with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
                arrays = {k.replace("|", "/"): z[k] for k in z.files}
            manifest = json.loads(bytes(arrays.pop("manifest")).decode())
        except FileNotFoundError:
            raise CompileError(f"no such module file: {path}") from None
        except Exception as e:  # zipfile, json and numpy raise many kinds for a damaged file
            raise CompileError(f"{path}: not a vtakit module ({type(e).__name__}: {e})") from None
        if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
            raise CompileError(f"{path}: not a vtakit module of version {VERSION}")
        cfg = HwConfig.from_dict(manifest["config"])
        graph = _graph_from_dict(manifest["graph"], {k[6:]: v for k, v in arrays.items() if k.startswith("graph/")})
        tasks: list = []
        for t in manifest["tasks"]:
            if "host" in t:
                tasks.append(t["host"])
                continue
            p = t["program"]
            node = t["node"]
            program = Program(p["name"], arrays[f"words/{node}"],
                              {r: arrays[f"relocs/{node}/{r}"] for r in p["relocs"]},
                              {k: TensorSpec.from_dict(s) for k, s in p["tensors"].items()},
                              arrays[f"packed/uops:{node}"], p["output"])
            tasks.append(VtaTask(node, t["op"], program, t["bind"],
                                 {k: ActBuffer(*v) for k, v in t["acts"].items()}, t["macs"], t["schedule"]))
        consts = {k[7:]: v for k, v in arrays.items() if k.startswith("packed/")}
        return cls(cfg, manifest["target"], graph, tasks, consts, DramPlan.from_dict(manifest["plan"]),
                   manifest.get("notes", {}), host=manifest.get("host", "cpu"))


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    return v


def _unjson(v):
    if v in ("inf", "-inf"):
        return float(v)
    if isinstance(v, list):
        return tuple(_unjson(x) for x in v)
    if isinstance(v, dict):
        return {k: _unjson(x) for k, x in v.items()}
    return v


def _graph_to_dict(g: Graph) -> dict:
    return dict(name=g.name, inputs=g.inputs, outputs=g.outputs,
                tensors={k: [list(t.shape), t.dtype, t.exp] for k, t in g.tensors.items()},
                nodes=[dict(op=n.op, name=n.name, inputs=n.inputs, outputs=n.outputs, attrs=_jsonable(n.attrs))
                       for n in g.nodes],
                notes=_jsonable(g.notes))


def _graph_from_dict(d: dict, consts: dict[str, np.ndarray]) -> Graph:
    nodes = [Node(n["op"], n["name"], n["inputs"], n["outputs"], _unjson(n["attrs"])) for n in d["nodes"]]
    tensors = {k: TensorInfo(tuple(s), dt, e) for k, (s, dt, e) in d["tensors"].items()}
    return Graph(nodes, tensors, d["inputs"], d["outputs"], consts, d["name"], d.get("notes", {}))


def _register_hosts() -> None:
    register_device("cpu", None, kind=HOST, counts_cycles=False,
                    description="every node on the host CPU (the bit-exact reference of the accelerator)")
    register_device("cuda", None, kind=HOST, counts_cycles=False, description="every node on the GPU")


_register_hosts()

