"""Design-space exploration: compile and simulate a network, and synthesize, for every configuration.

Each point of a design space becomes two kinds of independent job on an
Executor (a local process pool or a Dask cluster): `measure_point` compiles the
network for the configuration and runs it on the cycle model; `synthesize_netlist`
runs Yosys once per distinct netlist and FPGA family.  Configurations that differ
only in what never reaches the RTL (clock, memory latency, board name) share one
netlist, so a clock sweep costs no extra synthesis.  Long jobs go first, so two
workers finish a sweep about when its longest Yosys run allows.

Records are plain dicts in point order with no wall-clock figures, so the same
space gives the same records on any executor; the time spent goes to the
`jobs.jsonl` log, which is written as jobs finish and lets a rerun skip them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.compiler import zoo
from vtakit.compiler.pipeline import LOWERING_FAILED, compile_module
from vtakit.errors import BudgetExceeded, CompileError, DeviceTimeout, RtlError, VtaError
from vtakit.hw.gen import package_text
from vtakit.hw.synth import PARTS, TARGET_PARTS, synth as synthesize_part
from vtakit.hw.timing import XCUP_SCALE, analysis
from vtakit.isa.config import PRESETS, HwConfig
from vtakit.scheduling.design_space import DesignPoint
from vtakit.scheduling.executor import RETRIES, run_jobs
from vtakit.scheduling.log import apply_best

Progress = Callable[[int, int, str], None]
"""Called after each job with (jobs done, jobs in all, what finished)."""

RTL_FREE_FIELDS = ("target", "clock_mhz", "mem_latency")
"""HwConfig fields that do not reach the RTL package: configurations differing only here share a netlist."""
RESOURCES = ("lut", "ff", "bram36", "dsp")
MEASURED = ("cycles", "latency_ms", "utilization", "gops", "tuned_layers", "cosine")
TIMING = ("logic_ns", "routed_ns", "fmax_mhz", "clock_ok", "achievable_mhz", "latency_ms_achievable",
          "critical_path")
JOB_LOG = "jobs.jsonl"


# ------------------------------------------------------------------ networks
def check_network(network: str) -> str:
    """A zoo model name or an existing .onnx file; a VtaError naming the choices otherwise."""
    if network in zoo.NAMES or (network.endswith(".onnx") and Path(network).is_file()):
        return network
    raise VtaError(f"unknown network {network!r}: give a zoo model ({', '.join(zoo.NAMES)}) or an .onnx file")


def network_id(network: str) -> str:
    """Zoo name, or the .onnx file's content hash (a changed file is a new network for the job log)."""
    if network.endswith(".onnx"):
        return "onnx:" + hashlib.sha256(Path(network).read_bytes()).hexdigest()[:16]
    return network


def images_for(cfg: HwConfig, images: int | str) -> int:
    return cfg.batch if images == "batch" else int(images)


def _load_network(network: str, images: int):
    if network in zoo.NAMES:
        return zoo.build(network, batch=images)
    if images != 1:
        raise VtaError(f"images={images}: only zoo networks are rebuilt for a batch; {network} keeps its own shape")
    return network


# ------------------------------------------------------------------ netlists
def _rtl_body(cfg: HwConfig) -> str:
    return "\n".join(ln for ln in package_text(cfg).splitlines() if not ln.startswith("//"))


def netlist_config(cfg: HwConfig) -> HwConfig:
    """The configuration to synthesize for `cfg`: a preset with the same RTL if there is one (its cached
    Yosys result is reused), else `cfg` with the RTL-free fields at their defaults. RtlError if the RTL
    does not implement `cfg`."""
    defaults = {f.name: f.default for f in dataclasses.fields(HwConfig) if f.name in RTL_FREE_FIELDS}
    canonical = cfg.replace(**defaults)
    if _rtl_body(canonical) != _rtl_body(cfg):  # a field thought RTL-free reached the package
        return cfg
    for preset in PRESETS.values():
        if preset.replace(**defaults) == canonical:
            return preset
    return canonical


# ------------------------------------------------------------------ jobs
def _failure(stage: str, e: BaseException) -> dict[str, Any]:
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    if not isinstance(e, VtaError):
        reason = f"internal error ({type(e).__name__}): {reason}"
    # only what the inputs decide is worth keeping: not a timeout, a lack of memory, a bug or a lost worker
    # a wall-clock timeout may pass next time; a budget derived from the program (BudgetExceeded) will not
    kept = isinstance(e, VtaError) and (not isinstance(e, DeviceTimeout) or isinstance(e, BudgetExceeded))
    return {"failed": {"stage": stage, "error": type(e).__name__, "reason": reason, "deterministic": kept}}


def _deterministic(result: dict[str, Any]) -> bool:
    """Whether a job's result would be the same if it ran again: those go to the job log."""
    return "failed" not in result or result["failed"].get("deterministic", False)


def _compile(network: str, cfg: HwConfig, images: int, seed: int, tuning_logs: tuple[str, ...]):
    """The compiled module and how many of its layers took a schedule from the tuning logs."""
    if not tuning_logs:
        return compile_module(_load_network(network, images), cfg, seed=seed), 0
    with apply_best(list(tuning_logs)) as table:  # records for other configurations are not looked up
        module = compile_module(_load_network(network, images), cfg, seed=seed)
    return module, len(table.used)


def measure_point(network: str, cfg: HwConfig, images: int, seed: int,
                  tuning_logs: tuple[str, ...] = ()) -> dict[str, Any]:
    """Compile `network` for `cfg` (tuned schedules where the logs have them for `cfg`, else the default
    heuristic) and run it once on the cycle model with a seeded input."""
    stage = "compile"
    try:
        t0 = time.perf_counter()
        module, tuned = _compile(network, cfg, images, seed, tuning_logs)
        _check_fit(module)
        t1 = time.perf_counter()
        stage = "simulate"
        rng = np.random.default_rng(seed)
        feeds = {name: rng.standard_normal(info.shape).astype(info.dtype)
                 for name, info in sorted(module.inputs.items())}
        got = module.run(feeds, device="sim")
        t2 = time.perf_counter()
        rep = module.report()
        stage = "accuracy"
        cosine = _cosine(network, images, feeds, got)
    except Exception as e:  # noqa: BLE001 - a point that cannot be built is a record, not a crash
        return _failure(stage, e)
    cycles = rep.accelerator_cycles
    ms = rep.accelerator_ms
    return {"images": images, "cycles": cycles, "latency_ms": ms,
            "utilization": rep.utilization, "gops": 2 * rep.accelerator_macs / (ms * 1e6) if cycles else None,
            "gmacs": rep.accelerator_macs / 1e9, "accel_tasks": len(module.vta_tasks()),
            "host_tasks": len(module.tasks) - len(module.vta_tasks()), "tuned_layers": tuned, "cosine": cosine,
            "seconds": {"compile": round(t1 - t0, 2), "simulate": round(t2 - t1, 2)}}


def _check_fit(module) -> None:
    """A configuration some accelerator layer does not fit (its lowering failed, so the compiler ran it on the
    host) is a failed point: its cycles would count less work, not a faster design."""
    unfit = {n: why for n, why in module.notes.host_reasons.items() if why.startswith(LOWERING_FAILED)}
    if unfit:
        node, why = next(iter(unfit.items()))
        raise CompileError(f"{len(unfit)} accelerator layer(s) do not fit this configuration "
                           f"({node}: {why[len(LOWERING_FAILED) + 2:]})")


def _cosine(network: str, images: int, feeds: dict, got: dict) -> float:
    """Cosine of the int8 module's first output (cycle model) against the float network's on the same input:
    what a configuration's requantization buys (e.g. `pynq_mul`'s per-channel multipliers)."""
    want = compile_module(_load_network(network, images), target="cpu").run(feeds)
    a, b = (np.asarray(next(iter(d.values())), np.float64).ravel() for d in (got, want))
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0))


def synthesize_netlist(cfg: HwConfig, parts: tuple[str, ...], timeout_s: float = 3600.0) -> dict[str, Any]:
    """Yosys resources of `cfg` (one run; the parts share a family), its fit on each part and, for
    the xc7 family, the static timing estimate (hw.timing)."""
    try:
        t0 = time.perf_counter()
        results = [synthesize_part(cfg, part, timeout_s=timeout_s) for part in parts]
        t1 = time.perf_counter()
        # the static timing runs on the xc7 netlist (the family with cell delays): in that job only
        timed = analysis(cfg, timeout_s=timeout_s) if PARTS[parts[0]].family == "xc7" else None
    except Exception as e:  # noqa: BLE001
        return _failure("synth", e)
    first = results[0]
    out = {"netlist": cfg.label, **{k: getattr(first, k) for k in RESOURCES},
           "fits": {r.part: list(r.over) for r in results},
           "yosys_s": first.seconds, "seconds": {"synth": round(t1 - t0, 1)}}
    if timed is not None:
        out["timing"] = {"logic_ns": timed["logic"]["ns"], "routed_ns": timed["routed"]["ns"],
                         "critical_path": f"{timed['routed']['start']} -> {timed['routed']['end']}"}
        out["seconds"]["timing"] = round(time.perf_counter() - t1, 1)
    return out


# ------------------------------------------------------------------ plan
@dataclass(frozen=True)
class Job:
    key: str
    kind: str              # "measure" | "synth"
    fn: Callable
    args: tuple
    cost: float            # for ordering: long jobs first
    label: str


@dataclass(frozen=True)
class ExploreResult:
    network: str
    records: tuple[dict[str, Any], ...]
    primary_part: str
    parts: tuple[str, ...]
    families: tuple[str, ...]
    wall_s: float
    stage_seconds: dict[str, float] = field(default_factory=dict)   # summed over every job, reused ones too
    reused_jobs: int = 0                                           # taken from an earlier run's log


def _families(parts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for p in parts:
        out.setdefault(PARTS[p].family, []).append(p)
    return {fam: tuple(ps) for fam, ps in out.items()}


def _plan(network: str, points: Sequence[DesignPoint], *, synth: bool, parts: tuple[str, ...], images: int | str,
          seed: int, tuning_logs: tuple[str, ...], synth_timeout_s: float):
    """Jobs (deduplicated) and, per point, the keys of its measure job and its synth job per family."""
    net = network_id(network)
    source = hashlib.sha256(b"".join(Path(p).read_bytes() for p in tuning_logs)).hexdigest()[:16] \
        if tuning_logs else "default"
    jobs: dict[str, Job] = {}
    wiring: dict[int, dict[str, Any]] = {}
    families = _families(parts) if synth else {}
    for p in points:
        if not p.ok:
            continue
        cfg = p.config
        n = images_for(cfg, images)
        mkey = f"measure|{net}|{n}|{seed}|{source}|{cfg.fingerprint()}"
        jobs.setdefault(mkey, Job(mkey, "measure", measure_point, (network, cfg, n, seed, tuning_logs),
                                  cost=1.0, label=f"measured {p.name}"))
        wire: dict[str, Any] = {"measure": mkey, "synth": {}}
        if synth:
            try:
                rtl_cfg = netlist_config(cfg)
            except RtlError as e:
                wire["synth_error"] = _failure("synth", e)["failed"]
            else:
                for fam, fam_parts in families.items():
                    skey = f"synth2|{hashlib.sha256(_rtl_body(rtl_cfg).encode()).hexdigest()[:16]}|{fam}|" \
                           f"{','.join(fam_parts)}"
                    cost = 10.0 + rtl_cfg.peak_macs_per_cycle / 8  # Yosys time grows with the GEMM core
                    jobs.setdefault(skey, Job(skey, "synth", synthesize_netlist, (rtl_cfg, fam_parts, synth_timeout_s),
                                              cost=cost, label=f"synthesized {rtl_cfg.label} ({fam})"))
                    wire["synth"][fam] = skey
        wiring[p.index] = wire
    return jobs, wiring


def _read_log(path: Path) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
            key, result = entry["key"], entry["result"]
            if isinstance(result, dict) and _deterministic(result):   # older runs logged lost workers: rerun
                done[key] = result
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            continue  # a line cut short by a killed run: that job runs again
    return done


# ------------------------------------------------------------------ explore
def explore(network: str, points: Sequence[DesignPoint], executor: Executor, out_dir: str | Path | None = None, *,
            synth: bool = True, parts: Sequence[str] | None = None, part: str | None = None,
            images: int | str = 1, seed: int = 0, tuning_logs: Sequence[str | Path] = (),
            progress: Progress | None = None, resume: bool = True, synth_timeout_s: float = 3600.0,
            retries: int = RETRIES) -> ExploreResult:
    """Measure every point on `executor`; with `out_dir`, log jobs there as they finish (and, with `resume`,
    reuse that log's results). Only deterministic outcomes are logged (a result, a VtaError of the job's
    own); a job whose worker was lost runs again (`retries` times, then VtaError). `parts` default to every
    part in hw.synth.PARTS; `part` (default: the base configuration's board part, else the first) is the one
    whose family's figures records carry as lut/ff/bram36/dsp (other families' as lut_<family>, ...).
    `tuning_logs`: JSON-lines logs of `vtakit tune`; a point takes the best schedule they hold for each layer
    on exactly its configuration."""
    check_network(network)
    parts = tuple(parts) if parts else tuple(PARTS)
    board_part = TARGET_PARTS.get(points[0].base.target) if points else None
    part = part or (board_part if board_part in parts else parts[0])
    if part not in parts:
        parts = (part, *parts)
    for name in parts:
        if name not in PARTS:
            raise VtaError(f"unknown part {name!r}; known: {', '.join(PARTS)}")
    t0 = time.perf_counter()
    tuning_logs = tuple(str(p) for p in tuning_logs)
    for log in tuning_logs:
        if not Path(log).is_file():
            raise VtaError(f"tuning log {log} does not exist")
    jobs, wiring = _plan(network, points, synth=synth, parts=parts, images=images, seed=seed,
                         tuning_logs=tuning_logs, synth_timeout_s=synth_timeout_s)
    log_path = Path(out_dir) / JOB_LOG if out_dir is not None else None
    results: dict[str, dict] = {}
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if resume:
            results = {k: v for k, v in _read_log(log_path).items() if k in jobs}
        elif log_path.exists():
            log_path.unlink()
    reused = len(results)
    todo = sorted((j for j in jobs.values() if j.key not in results), key=lambda j: -j.cost)
    done = reused
    if progress:
        progress(done, len(jobs), f"{reused} jobs from {log_path}" if reused else "started")
    calls = {j.key: (lambda ex, j=j: ex.submit(j.fn, *j.args)) for j in todo}
    log = log_path.open("a") if log_path is not None else None
    try:
        for key, fut in run_jobs(executor, calls, retries=retries, describe=lambda k: jobs[k].label):
            job = jobs[key]
            try:
                result = fut.result()
            except Exception as e:  # noqa: BLE001 - a bug in the job or an unpicklable result
                result = _failure(job.kind, e)
            results[job.key] = result
            if log is not None and _deterministic(result):   # anything else runs again next time
                log.write(json.dumps({"key": job.key, "result": result}, default=str) + "\n")
                log.flush()
            done += 1
            if progress:
                progress(done, len(jobs), job.label + (" (failed)" if "failed" in result else ""))
    finally:
        if log is not None:
            log.close()
    stage_seconds: dict[str, float] = {}
    for result in results.values():
        for stage, s in result.get("seconds", {}).items():
            stage_seconds[stage] = stage_seconds.get(stage, 0.0) + s
    families = tuple(_families(parts)) if synth else ()
    records = tuple(_record(p, wiring.get(p.index), results, images, part, parts, families) for p in points)
    records = mark_pareto(records)
    return ExploreResult(network=network, records=records, primary_part=part, parts=parts, families=families,
                         wall_s=time.perf_counter() - t0, stage_seconds=stage_seconds, reused_jobs=reused)


# ------------------------------------------------------------------ records
def _params(p: DesignPoint) -> dict[str, Any]:
    values = p.requested()
    return {"batch": values["batch"], "block_in": values["block_in"], "block_out": values["block_out"],
            "uop_kib": values["uop_buff_bytes"] / 1024, "inp_kib": values["inp_buff_bytes"] / 1024,
            "wgt_kib": values["wgt_buff_bytes"] / 1024, "acc_kib": values["acc_buff_bytes"] / 1024,
            "bus_bytes": values["bus_bytes"], "clock_mhz": values["clock_mhz"], "alu_mul": values["alu_mul"]}


def _record(p: DesignPoint, wire: dict | None, results: dict[str, dict], images: int | str, part: str,
            parts: tuple[str, ...], families: tuple[str, ...]) -> dict[str, Any]:
    rec: dict[str, Any] = {"index": p.index, "point": p.name, "config": p.config.label if p.ok else "",
                           **_params(p), "status": "ok", "failed_stage": "", "reason": "",
                           "images": images_for(p.config, images) if p.ok else None,
                           **dict.fromkeys(MEASURED)}
    failures: list[dict] = []
    if not p.ok:
        failures.append({"stage": "config", "reason": p.error})
    else:
        measured = results.get(wire["measure"], {"failed": {"stage": "measure", "reason": "job did not finish"}})
        if "failed" in measured:
            failures.append(measured["failed"])
        else:
            rec.update({k: measured.get(k) for k in MEASURED})
    primary = PARTS[part].family
    for fam in families:
        suffix = "" if fam == primary else f"_{fam}"
        for k in RESOURCES:
            rec[k + suffix] = None
    if families:
        rec.update(dict.fromkeys(TIMING))
        rec["netlist"] = ""
        rec.update({f"fits_{name}": "" for name in parts})
        rec["smallest_part"] = ""
    if p.ok and families:
        if "synth_error" in wire:
            failures.append(wire["synth_error"])
        for fam, key in wire["synth"].items():
            synthesized = results.get(key, {"failed": {"stage": "synth", "reason": "job did not finish"}})
            if "failed" in synthesized:
                if synthesized["failed"] not in failures:
                    failures.append(synthesized["failed"])
                continue
            suffix = "" if fam == primary else f"_{fam}"
            rec.update({k + suffix: synthesized[k] for k in RESOURCES})
            rec["netlist"] = synthesized["netlist"]
            for name, over in synthesized["fits"].items():
                rec[f"fits_{name}"] = "yes" if not over else "over: " + " ".join(over)
            if "timing" in synthesized:
                rec.update(_timing_fields(synthesized["timing"], rec, PARTS[part].family))
        fitting = [n for n in sorted(parts, key=lambda n: (PARTS[n].lut, PARTS[n].bram36, PARTS[n].dsp))
                   if rec[f"fits_{n}"] == "yes"]
        if wire["synth"] and not any("synth" == f["stage"] for f in failures):
            rec["smallest_part"] = fitting[0] if fitting else "none"
    if failures:
        rec["status"] = "failed"
        rec["failed_stage"] = ", ".join(f["stage"] for f in failures)
        rec["reason"] = "; ".join(f["reason"] for f in failures)
    rec["pareto"] = False
    return rec


def _timing_fields(t: dict, rec: dict, family: str) -> dict[str, Any]:
    """Estimated fmax on the primary part's family, the clock the point can run at and its
    latency there (hw.timing: 7-series delays, scaled for UltraScale+)."""
    scale = XCUP_SCALE if family == "xcup" else 1.0
    fmax = 1000.0 / (t["routed_ns"] * scale)
    asked = rec["clock_mhz"]
    achievable = min(asked, fmax)
    latency = rec.get("latency_ms")
    return {"logic_ns": round(t["logic_ns"] * scale, 2), "routed_ns": round(t["routed_ns"] * scale, 2),
            "fmax_mhz": round(fmax, 1), "clock_ok": asked <= fmax, "achievable_mhz": round(achievable, 1),
            "latency_ms_achievable": round(latency * asked / achievable, 6) if latency is not None else None,
            "critical_path": t["critical_path"]}


def pareto_front(records: Sequence[dict], keys: Sequence[str]) -> list[int]:
    """Indices of the records (with every key set, status ok) that no other record beats on all keys."""
    cands = [r for r in records if r["status"] == "ok" and all(r.get(k) is not None for k in keys)]
    front = []
    for r in cands:
        dominated = any(all(o[k] <= r[k] for k in keys) and any(o[k] < r[k] for k in keys)
                        for o in cands if o is not r)
        if not dominated:
            front.append(r["index"])
    return front


def mark_pareto(records: Sequence[dict]) -> tuple[dict, ...]:
    """Set `pareto` on the records nondominated in latency and every resource (latency alone without synth)."""
    have_resources = any(r.get("lut") is not None for r in records)
    # with a timing estimate, latency at the clock the point can reach (min of asked and estimated)
    lat = "latency_ms_achievable" if any(r.get("latency_ms_achievable") is not None for r in records) \
        else "latency_ms"
    keys = (lat, *(k for k in RESOURCES if k != "ff")) if have_resources else (lat,)
    front = set(pareto_front(records, keys))
    return tuple({**r, "pareto": r["index"] in front} for r in records)
