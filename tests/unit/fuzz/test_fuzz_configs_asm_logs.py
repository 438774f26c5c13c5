"""Mutation fuzzing of configurations, assembly and tuning logs (issue 37): whatever the input, the
outcome is a result that holds together or exactly one error from vtakit.errors, never another exception.

The default budget is small (the file runs in seconds, derandomized so the suite is repeatable);
VTAKIT_FUZZ_EXAMPLES=5000 runs a long, randomized campaign.
"""

import json
import math
import os
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vtakit.compiler.backends.vta import ops
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.errors import ConfigError, IsaError, VtaError
from vtakit.isa.asm import asm, disasm
from vtakit.isa.random_instructions import random_instructions
from vtakit.isa.config import PRESETS, HwConfig
from vtakit.isa.encoding import encode_program
from vtakit.scheduling.log import TuningLog, TuningLogWarning, apply_best, read_log
from vtakit.scheduling.log_records import knobs_problem
from vtakit.scheduling.measure import task_data
from vtakit.scheduling.task import ConvTask

LONG = "VTAKIT_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("VTAKIT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PYNQ = HwConfig.preset("pynq")

# ----------------------------------------------------------------- values
hostile_numbers = st.one_of(
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from([0, 1, -1, 2, 3, 16, 1 << 16, 1 << 26, 1 << 27, 1 << 39, 10 ** 400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 100.5]),
)
hostile_values = st.one_of(
    hostile_numbers, st.booleans(), st.none(), st.text(max_size=20),
    st.sampled_from(["x" * 100_000, "pynq", "ultra96", "1x8"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _mutate_dict(data, base: dict) -> dict:
    """Change, delete or add a few keys of `base`."""
    out = dict(base)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        op = data.draw(st.sampled_from(["set", "delete", "add"]), label="op")
        if op == "add" or not out:
            out[data.draw(st.text(max_size=12), label="new key")] = data.draw(hostile_values, label="value")
            continue
        key = data.draw(st.sampled_from(sorted(out, key=str)), label="key")
        if op == "delete":
            del out[key]
        else:
            out[key] = data.draw(hostile_values, label="value")
    return out


def _mutate_bytes(data, raw: bytes) -> bytes:
    """Flip, insert, delete or truncate a few bytes of `raw`."""
    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4), label="byte mutations")):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]), label="byte op")
        at = data.draw(st.integers(0, max(len(buf) - 1, 0)), label="at")
        if op == "flip" and buf:
            buf[at] = data.draw(st.integers(0, 255), label="byte")
        elif op == "insert":
            buf[at:at] = data.draw(st.binary(max_size=8) | st.sampled_from([b"\xff", b"\n", b"NaN", b"1" * 500]),
                                   label="inserted")
        elif op == "delete":
            del buf[at:at + data.draw(st.integers(1, 8), label="length")]
        else:
            del buf[at:]
    return bytes(buf)


# ----------------------------------------------------------------- configs
VTA_STYLE = {"TARGET": "pynq", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5,
             "LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_UOP_BUFF_SIZE": 15, "LOG_INP_BUFF_SIZE": 15,
             "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17}


def _check_config(cfg: HwConfig) -> None:
    """An accepted configuration holds together: finite figures, standard JSON that reads back the same."""
    text = cfg.to_json()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON number {name}"))
    assert HwConfig.from_dict(json.loads(text)) == cfg
    summary = cfg.summary()
    assert math.isfinite(summary["peak_gops"]) and cfg.bitstream_name
    assert all(0 < cfg.depth(m) <= 1 << 16 for m in range(4))


@FUZZ
@given(data=st.data(), base=st.sampled_from([*(p.to_dict() for p in PRESETS.values()), VTA_STYLE]))
def test_fuzz_config_dicts(data, base):
    mutated = _mutate_dict(data, base)
    try:
        cfg = HwConfig.from_dict(mutated)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    _check_config(cfg)


@FUZZ
@given(data=st.data(), base=st.sampled_from([PRESETS["pynq"].to_json(), PRESETS["1x8"].to_json(),
                                             json.dumps(VTA_STYLE)]))
def test_fuzz_config_files(data, base):
    raw = _mutate_bytes(data, base.encode())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.json"
        path.write_bytes(raw)
        try:
            cfg = HwConfig.from_json(path)
        except ConfigError:
            return
    _check_config(cfg)


# ---------------------------------------------------------------- assembly
PROGRAMS = {name: disasm(random_instructions(HwConfig.preset(name), 12, seed=3), HwConfig.preset(name))
            for name in ("pynq", "1x8")}
HOSTILE_TOKENS = st.sampled_from([
    "sram=-1", "dram=0x" + "f" * 17, "x=99999999999999999999", "stride=1e3", "uop=5:", "iter=1x1x1", "reset=2",
    "use_imm=1", "imm=-32769", "pop=prev,prev", "push=middle", "LOAD.FOO", "ALU.__CLASS__", "GEMM", "FINISH",
    "7", "compute", "store", "=", "==", "sram==1", "\x00", "\u0661", "x" * 70_000, "#", ";", "\r", "\x0c",
])


@FUZZ
@given(data=st.data(), name=st.sampled_from(sorted(PROGRAMS)), as_bytes=st.booleans())
def test_fuzz_assembly(data, name, as_bytes):
    cfg = HwConfig.preset(name)
    lines = PROGRAMS[name].splitlines()
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        k = data.draw(st.integers(0, len(lines) - 1), label="line")
        tokens = lines[k].split()
        if tokens:
            at = data.draw(st.integers(0, len(tokens) - 1), label="token")
            tokens[at] = data.draw(HOSTILE_TOKENS | st.text(max_size=12), label="replacement")
        lines[k] = " ".join(tokens)
    text = "\n".join(lines) + "\n"
    source = _mutate_bytes(data, text.encode()) if as_bytes else text
    try:
        program = asm(source, cfg)
    except IsaError as e:
        assert e.line is not None and len(str(e)) <= 400
        return
    encode_program(program, cfg)                     # accepted means encodable
    assert asm(disasm(program, cfg), cfg) == program


# ------------------------------------------------------------- tuning logs
TINY = ConvTask("tiny", PYNQ, 1, 32, 8, 8, 32, 3, 1, 1)
SCHEDULES = [ConvKnobs(tile_oc=2, tile_oh=8, tile_ow=8, tile_ic=2, vthreads=1).to_dict(),
             ConvKnobs(tile_oc=1, tile_oh=4, tile_ow=8, tile_ic=1, vthreads=2).to_dict()]
RECORDS = [{"workload": TINY.key, "config": PYNQ.fingerprint(), "config_label": "pynq", "schedule": s,
            "cycles": c, "error": None, "trial": i, "tuner": "random", "compile_s": 0.1, "run_s": 0.2}
           for i, (s, c) in enumerate(zip(SCHEDULES, (9000, 7000)))]
RECORD_VALUES = st.one_of(hostile_values, st.dictionaries(st.sampled_from(sorted(SCHEDULES[0])), hostile_values))


@FUZZ
@given(data=st.data(), byte_level=st.booleans())
def test_fuzz_tuning_logs(data, byte_level):
    records = [dict(r) for r in RECORDS]
    k = data.draw(st.integers(0, len(records) - 1), label="record")
    if data.draw(st.booleans(), label="mutate schedule"):
        records[k]["schedule"] = _mutate_dict(data, records[k]["schedule"])
    else:
        records[k] = _mutate_dict(data, records[k])
        for key in [key for key in records[k] if data.draw(st.booleans(), label=f"replace {key!r}")][:1]:
            records[k][key] = data.draw(RECORD_VALUES, label="value")
    raw = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    if byte_level:
        raw = _mutate_bytes(data, raw)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningLogWarning)
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(raw)
        try:
            read_log(path)
        except VtaError as e:
            assert "\n" not in str(e)
        log = TuningLog(path)                          # skips what is invalid: never raises on content
        for rec in log.for_task(TINY.key, PYNQ):
            assert rec["cycles"] is None or rec["cycles"] >= TINY.peak_cycles
        log.append(RECORDS[0])
        assert read_log(path, strict=False)[-1] == {**RECORDS[0], "timestamp": log.records[-1]["timestamp"]}
        x, w, b, expect = task_data(TINY)
        with apply_best(path) as table:
            knobs = table.lookup(TINY.key, PYNQ)
            assert knobs is None or knobs_problem(knobs) is None
            y, _ = ops.conv2d(x, w, padding=1, bias=b, shift=8, clip=(0, 127), config=PYNQ)
        assert (y == expect).all()
