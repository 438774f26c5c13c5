"""HwConfig: the one description of an accelerator instance.

Every other layer (encoding, simulators, RTL parameters, compiler tiling, the
board driver) reads its facts from here: GEMM shape, element widths, buffer
sizes, clock and the memory-timing figures the cycle model uses.  Derived values
(depths, element bytes, field widths) are properties so they can never drift
from the parameters they come from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.errors import ConfigError
from vtakit.isa.config_io import read_json as _read_json, show as _show
from vtakit.isa.fields import check_layouts
from vtakit.isa.opcodes import MemId

_INT_DTYPES = {8: np.int8, 16: np.int16, 32: np.int32}
_SRAM_ADDR_BITS = 16  # width of sram_base in LOAD/STORE (ISA.md)

MAX_BUFF_BYTES = 1 << 26
"""64 MiB per on-chip buffer: more than the largest FPGA holds in all its BRAM and URAM (a VU13P:
about 57 MB).  The address fields bound a buffer's depth (2^16 elements), not its element size, and
a simulator allocates every buffer (several times over, in its float copies)."""
MAX_CLOCK_MHZ = 10_000.0
"""10 GHz: no FPGA fabric comes near it; a bound keeps every derived figure (GOPS, ms) finite."""
_INT_LIMITS = {"mem_latency": 1 << 16, "gemm_pipeline": 1 << 10, "alu_pipeline": 1 << 10,
               "alu_ii": 1 << 10, "cmd_queue_depth": 1 << 16, "token_queue_depth": 1 << 16}
"""Upper bounds of the timing fields: far beyond any memory or pipeline, and small enough that the
cycle model's int64 arithmetic and the RTL's 32-bit parameters never overflow."""
_TARGET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


DEFAULT_PRESET = "pynq"
"""The configuration used wherever none is named: VTA's default, on the PYNQ-Z1."""


def _is_pow2(v: int) -> bool:
    return v > 0 and (v & (v - 1)) == 0


@dataclass(frozen=True)
class HwConfig:
    """Parameters of one accelerator configuration (defaults: VTA's `pynq`)."""

    target: str = DEFAULT_PRESET
    """Board family the configuration is built for (VTA's TARGET)."""
    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    inp_bits: int = 8
    wgt_bits: int = 8
    acc_bits: int = 32
    out_bits: int = 8
    uop_buff_bytes: int = 1 << 15
    inp_buff_bytes: int = 1 << 15
    wgt_buff_bytes: int = 1 << 18
    acc_buff_bytes: int = 1 << 17
    clock_mhz: float = 100.0
    bus_bytes: int = 8
    """Bytes the memory port moves per accelerator cycle (64-bit AXI on PYNQ)."""
    mem_latency: int = 24
    """Cycles from a burst request to its first beat (and from last write beat to response)."""
    mem_burst_beats: int = 256
    """Longest AXI burst; bursts never cross a burst-sized aligned boundary."""
    cmd_queue_depth: int = 512
    """Instructions each module's command queue holds."""
    token_queue_depth: int = 128
    """Tokens each of the four dependency queues holds."""
    gemm_pipeline: int = 4
    """Cycles after the last micro-op issues before the instruction completes (the RTL's drain:
    operands, products, two adder-tree halves, the accumulate; hw.gen refuses less than its 4)."""
    alu_pipeline: int = 2
    """The same for ALU instructions (accumulator read, latch, then compute; at least 2)."""
    alu_ii: int = 1
    """Cycles between ALU micro-ops (VTA's HLS ALU used 2)."""
    alu_mul: bool = False
    """Whether the tensor ALU implements MUL (an extension; VTA has none)."""
    # The semantic choices where vtakit's extended hardware and VTA's differ (docs/ISA.md,
    # "Where ISA.md leaves a choice").  False is VTA's hardware; a program that needs an
    # extension the configuration lacks is rejected with SimError, never run differently.
    wgt_load_pad: bool = False
    """LOAD.WGT honours its padding fields (VTA's load module ignores them: rejected)."""
    acc8_load: bool = False
    """LOAD of ACC_8BIT sign-extends int8 into the accumulator (VTA has none: rejected)."""
    alu_reset: bool = False
    """ALU with reset=1 zeroes its destinations (VTA ignores the flag: rejected)."""
    shr_wide: bool = False
    """SHR reads log2(acc_bits)+1 operand bits as its signed amount; VTA reads log2(acc_bits)."""
    store_from_acc: bool = False
    """STORE reads accumulator entries truncated to out_bits, whatever wrote them.  False is
    VTA's separate output buffer, which only GEMM and ALU write (a LOAD.ACC leaves it)."""

    def __post_init__(self) -> None:
        _validate(self)

    # ------------------------------------------------------------------ presets
    @staticmethod
    def preset(name: str) -> "HwConfig":
        """A named configuration: see `preset_names()`."""
        try:
            return PRESETS[name]
        except KeyError:
            raise ConfigError(
                f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}", field="preset"
            ) from None

    @staticmethod
    def preset_names() -> list[str]:
        return list(PRESETS)

    @staticmethod
    def load(spec: "str | Path | HwConfig | None") -> "HwConfig":
        """A preset name, a JSON file path (VTA or vtakit format), or a config (None: DEFAULT_PRESET)."""
        if spec is None:
            return PRESETS[DEFAULT_PRESET]
        if isinstance(spec, HwConfig):
            return spec
        if isinstance(spec, str) and spec in PRESETS:
            return PRESETS[spec]
        if not isinstance(spec, (str, Path)):
            raise ConfigError(f"a configuration is a preset name, a JSON file or an HwConfig, "
                              f"not {type(spec).__name__}")
        path = Path(spec)
        try:
            is_file = path.suffix == ".json" or path.exists()
        except OSError:  # a name the file system cannot even look up (too long, ...): not a file
            is_file = False
        if is_file:
            return HwConfig.from_json(path)
        return HwConfig.preset(str(spec))

    def replace(self, **changes: Any) -> "HwConfig":
        """A copy with some parameters changed (validated like any config)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError("unknown parameter", field=sorted(unknown)[0])
        return dataclasses.replace(self, **changes)

    @property
    def preset_name(self) -> str | None:
        """The preset this configuration equals, if any."""
        for name, cfg in PRESETS.items():
            if cfg == self:
                return name
        return None

    @property
    def label(self) -> str:
        """Preset name, or a VTA-style bitstream string for custom configs."""
        return self.preset_name or self.bitstream_name

    @property
    def bitstream_name(self) -> str:
        """VTA's naming scheme, e.g. `1x16_i8w8a32_15_15_18_17`."""
        logs = [int(math.log2(b)) for b in
                (self.uop_buff_bytes, self.inp_buff_bytes, self.wgt_buff_bytes, self.acc_buff_bytes)]
        block = (f"{self.block_in}" if self.block_in == self.block_out
                 else f"{self.block_in}x{self.block_out}")
        return (f"{self.batch}x{block}_i{self.inp_bits}w{self.wgt_bits}a{self.acc_bits}_"
                + "_".join(map(str, logs)))

    # --------------------------------------------------------------- JSON I/O
    def to_dict(self) -> dict[str, Any]:
        return {"vtakit_config": 1, **dataclasses.asdict(self)}

    def to_json(self, path: "str | Path | None" = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"   # standard JSON only
        if path is not None:
            Path(path).write_text(text)
        return text

    @staticmethod
    def from_json(path: "str | Path") -> "HwConfig":
        """Read a vtakit config or a VTA `vta_config.json` (LOG_* keys)."""
        data = _read_json(Path(path))
        try:
            return HwConfig.from_dict(data)
        except ConfigError as e:                 # name the file as well as the field
            raise ConfigError(f"{e.detail} (in {path})", field=e.field) from None

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "HwConfig":
        if not isinstance(data, dict):
            raise ConfigError("a configuration must be a JSON object")
        for key in data:
            if not isinstance(key, str):
                raise ConfigError(f"keys must be strings, got {_show(key)}")
        if any(k.startswith("LOG_") or k in ("TARGET", "HW_VER") for k in data):
            return _from_vta_dict(data)
        return _from_vtakit_dict(data)

    def fingerprint(self) -> str:
        """Short stable hash, e.g. to key caches of artefacts built for this config."""
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # ---------------------------------------------------------------- derived
    def elem_bytes(self, mem: int) -> int:
        """Bytes of one element of a memory type; DRAM addresses count these."""
        mem = MemId(mem)
        if mem == MemId.UOP:
            return 4
        if mem == MemId.WGT:
            return self.block_out * self.block_in * self.wgt_bits // 8
        if mem == MemId.INP:
            return self.batch * self.block_in * self.inp_bits // 8
        if mem == MemId.ACC:
            return self.batch * self.block_out * self.acc_bits // 8
        if mem == MemId.OUT:
            return self.batch * self.block_out * self.out_bits // 8
        return self.batch * self.block_out  # ACC_8BIT: one byte per lane

    def depth(self, mem: int) -> int:
        """Elements an on-chip buffer holds (OUT and ACC_8BIT address the acc buffer)."""
        mem = MemId(mem)
        if mem == MemId.UOP:
            return self.uop_buff_bytes // 4
        if mem == MemId.WGT:
            return self.wgt_buff_bytes // self.elem_bytes(MemId.WGT)
        if mem == MemId.INP:
            return self.inp_buff_bytes // self.elem_bytes(MemId.INP)
        return self.acc_buff_bytes // self.elem_bytes(MemId.ACC)

    @property
    def uop_depth(self) -> int:
        return self.depth(MemId.UOP)

    @property
    def inp_depth(self) -> int:
        return self.depth(MemId.INP)

    @property
    def wgt_depth(self) -> int:
        return self.depth(MemId.WGT)

    @property
    def acc_depth(self) -> int:
        return self.depth(MemId.ACC)

    @property
    def log_uop_depth(self) -> int:
        return self.uop_depth.bit_length() - 1

    @property
    def log_inp_depth(self) -> int:
        return self.inp_depth.bit_length() - 1

    @property
    def log_wgt_depth(self) -> int:
        return self.wgt_depth.bit_length() - 1

    @property
    def log_acc_depth(self) -> int:
        return self.acc_depth.bit_length() - 1

    @property
    def shr_arg_bits(self) -> int:
        """Low operand bits, read as signed, that give the SHR amount (VTA: 5 for int32)."""
        log_acc = self.acc_bits.bit_length() - 1
        return log_acc + 1 if self.shr_wide else log_acc

    @property
    def shr_max(self) -> int:
        """The largest right shift one SHR expresses (15 on VTA's int32 accumulator)."""
        return (1 << (self.shr_arg_bits - 1)) - 1

    @property
    def extensions(self) -> tuple[str, ...]:
        """The fields naming behaviour VTA's hardware lacks that this configuration has."""
        return tuple(name for name in EXTENSION_FIELDS if getattr(self, name))

    @property
    def vta_semantics(self) -> bool:
        """Whether every instruction this configuration accepts runs as on VTA's HLS design."""
        return not self.extensions

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    @property
    def peak_gops(self) -> float:
        """2 x MACs per second at the configured clock, in GOPS."""
        return 2 * self.peak_macs_per_cycle * self.clock_mhz / 1000.0

    @property
    def burst_bytes(self) -> int:
        return self.mem_burst_beats * self.bus_bytes

    @property
    def inp_dtype(self) -> np.dtype:
        return np.dtype(_INT_DTYPES[self.inp_bits])

    @property
    def wgt_dtype(self) -> np.dtype:
        return np.dtype(_INT_DTYPES[self.wgt_bits])

    @property
    def acc_dtype(self) -> np.dtype:
        return np.dtype(_INT_DTYPES[self.acc_bits])

    @property
    def out_dtype(self) -> np.dtype:
        return np.dtype(_INT_DTYPES[self.out_bits])

    def summary(self) -> dict[str, Any]:
        """Parameters and the derived figures people look at, for tables."""
        return {
            **dataclasses.asdict(self),
            "gemm": f"{self.batch}x{self.block_in} x {self.block_in}x{self.block_out}",
            "uop_depth": self.uop_depth,
            "inp_depth": self.inp_depth,
            "wgt_depth": self.wgt_depth,
            "acc_depth": self.acc_depth,
            "uop_fields": f"dst {self.log_acc_depth} / src {max(self.log_acc_depth, self.log_inp_depth)}"
                          f" / wgt {self.log_wgt_depth} bits",
            "peak_macs_per_cycle": self.peak_macs_per_cycle,
            "peak_gops": round(self.peak_gops, 2),
            "bandwidth_gbs": round(self.bus_bytes * self.clock_mhz / 1000.0, 3),
        }


EXTENSION_FIELDS = ("alu_mul", "wgt_load_pad", "acc8_load", "alu_reset", "shr_wide", "store_from_acc")
"""Boolean fields whose True value is a vtakit extension of VTA's behaviour."""
_BOOL_FIELDS = frozenset(EXTENSION_FIELDS)


# ------------------------------------------------------------------ validation
def _validate(cfg: HwConfig) -> None:
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.name == "target":
            if not isinstance(value, str) or not value:
                raise ConfigError("must be a non-empty string", field="target")
        elif f.name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise ConfigError(f"must be true or false, got {value!r}", field=f.name)
        elif f.name == "clock_mhz":
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value <= MAX_CLOCK_MHZ:      # NaN and infinities fail this too
                raise ConfigError(f"must be a finite number in (0, {MAX_CLOCK_MHZ:g}] MHz, got {_show(value)}",
                                  field=f.name)
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be an integer, got {_show(value)}", field=f.name)
        elif value.bit_length() > 64:
            raise ConfigError(f"{value.bit_length()}-bit integer is out of any sane range", field=f.name)
    if len(cfg.target) > 64 or not set(cfg.target) <= _TARGET_CHARS:
        raise ConfigError(f"must be a short name of letters, digits, '_', '.' and '-', got {_show(cfg.target)}",
                          field="target")

    for name in ("batch", "block_in", "block_out"):
        if not _is_pow2(getattr(cfg, name)):
            raise ConfigError(f"must be a power of two, got {getattr(cfg, name)}", field=name)
    for name in ("inp_bits", "wgt_bits", "out_bits"):
        if getattr(cfg, name) not in (8, 16):
            raise ConfigError(f"must be 8 or 16, got {getattr(cfg, name)}", field=name)
    if cfg.acc_bits not in (16, 32):
        raise ConfigError(f"must be 16 or 32, got {cfg.acc_bits}", field="acc_bits")
    if cfg.out_bits > cfg.acc_bits:
        raise ConfigError(f"output ({cfg.out_bits} bits) wider than the accumulator", field="out_bits")

    for name, mem in (("uop_buff_bytes", MemId.UOP), ("inp_buff_bytes", MemId.INP),
                      ("wgt_buff_bytes", MemId.WGT), ("acc_buff_bytes", MemId.ACC)):
        size, elem = getattr(cfg, name), cfg.elem_bytes(mem)
        if not _is_pow2(size):
            raise ConfigError(f"must be a power of two, got {size}", field=name)
        if size > MAX_BUFF_BYTES:
            raise ConfigError(f"{size:,} bytes exceeds the {MAX_BUFF_BYTES >> 20} MiB an on-chip buffer may have",
                              field=name)
        if size < elem:
            raise ConfigError(f"{size} bytes is smaller than one {mem.name} element ({elem} bytes)",
                              field=name)
        if size // elem > 1 << _SRAM_ADDR_BITS:
            raise ConfigError(
                f"{size // elem} {mem.name} elements exceed what the 16-bit sram_base field addresses",
                field=name)

    if not _is_pow2(cfg.bus_bytes) or cfg.bus_bytes > 128:
        raise ConfigError(f"must be a power of two up to 128, got {cfg.bus_bytes}", field="bus_bytes")
    if not _is_pow2(cfg.mem_burst_beats) or cfg.mem_burst_beats > 256:
        raise ConfigError(f"must be a power of two up to 256 (AXI4), got {cfg.mem_burst_beats}",
                          field="mem_burst_beats")
    if cfg.burst_bytes < 16:
        raise ConfigError(f"bursts of {cfg.burst_bytes} bytes cannot carry one 16-byte instruction",
                          field="mem_burst_beats")
    if cfg.burst_bytes > 4096:
        raise ConfigError(f"bursts of {cfg.burst_bytes} bytes would cross AXI's 4 KiB boundary",
                          field="mem_burst_beats")
    for name in ("mem_latency", "gemm_pipeline", "alu_pipeline"):
        if getattr(cfg, name) < 0:
            raise ConfigError("must not be negative", field=name)
    for name in ("cmd_queue_depth", "token_queue_depth", "alu_ii"):
        if getattr(cfg, name) < 1:
            raise ConfigError("must be at least 1", field=name)
    for name, limit in _INT_LIMITS.items():
        if getattr(cfg, name) > limit:
            raise ConfigError(f"{getattr(cfg, name):,} is beyond the limit of {limit:,}", field=name)

    check_layouts(cfg)


# --------------------------------------------------------------- JSON loaders
_VTA_IGNORED_KEYS = {"HW_VER", "ACC_DEP_DISTANCE"}
_VTA_LOG_KEYS = {
    "LOG_INP_WIDTH": "inp_bits", "LOG_WGT_WIDTH": "wgt_bits", "LOG_ACC_WIDTH": "acc_bits",
    "LOG_OUT_WIDTH": "out_bits", "LOG_BATCH": "batch", "LOG_BLOCK_IN": "block_in",
    "LOG_BLOCK_OUT": "block_out", "LOG_UOP_BUFF_SIZE": "uop_buff_bytes",
    "LOG_INP_BUFF_SIZE": "inp_buff_bytes", "LOG_WGT_BUFF_SIZE": "wgt_buff_bytes",
    "LOG_ACC_BUFF_SIZE": "acc_buff_bytes",
}


def _from_vta_dict(data: dict[str, Any]) -> HwConfig:
    """VTA's format: board parameters come from the preset of the same TARGET."""
    target = data.get("TARGET", DEFAULT_PRESET)
    if not isinstance(target, str):
        raise ConfigError(f"must be a string, got {_show(target)}", field="TARGET")
    base = PRESETS.get(target, PRESETS[DEFAULT_PRESET])
    params: dict[str, Any] = {"target": target}
    for key, value in data.items():
        if key in ("TARGET", "LOG_BLOCK", "LOG_OUT_BUFF_SIZE") or key in _VTA_IGNORED_KEYS:
            continue
        if key not in _VTA_LOG_KEYS:
            raise ConfigError("unknown key in VTA config", field=key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 40:
            raise ConfigError(f"must be a small non-negative integer, got {_show(value)}", field=key)
        params[_VTA_LOG_KEYS[key]] = 1 << value
    if "LOG_BLOCK" in data:
        value = data["LOG_BLOCK"]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 40:
            raise ConfigError(f"must be a small non-negative integer, got {_show(value)}", field="LOG_BLOCK")
        params.setdefault("block_in", 1 << value)
        params.setdefault("block_out", 1 << value)
    if "LOG_INP_WIDTH" in data and "LOG_OUT_WIDTH" not in data:
        params["out_bits"] = params["inp_bits"]  # VTA ties the output width to the input's
    cfg = dataclasses.replace(base, **params)
    if "LOG_OUT_BUFF_SIZE" in data:
        expect = cfg.acc_buff_bytes * cfg.out_bits // cfg.acc_bits
        if data["LOG_OUT_BUFF_SIZE"] != int(math.log2(expect)):
            raise ConfigError(f"inconsistent with the accumulator buffer (expected "
                              f"{int(math.log2(expect))})", field="LOG_OUT_BUFF_SIZE")
    return cfg


def _from_vtakit_dict(data: dict[str, Any]) -> HwConfig:
    names = {f.name for f in fields(HwConfig)}
    params = dict(data)
    params.pop("vtakit_config", None)
    base_name = params.pop("preset", DEFAULT_PRESET)
    if not isinstance(base_name, str):
        raise ConfigError(f"must be a preset name, got {_show(base_name)}", field="preset")
    base = HwConfig.preset(base_name)
    for key in params:
        if key not in names:
            raise ConfigError("unknown key", field=key)
    return dataclasses.replace(base, **params)


def _presets() -> dict[str, HwConfig]:
    pynq = HwConfig()
    # vtakit's extended semantics, kept where the exploration presets are built around them.
    extended = dict(alu_mul=True, wgt_load_pad=True, acc8_load=True, alu_reset=True, shr_wide=True,
                    store_from_acc=True)
    zynq_mp = dict(clock_mhz=333.0, bus_bytes=16, mem_latency=64)
    return {
        # VTA's default: PYNQ-Z1 (xc7z020), 100 MHz, one 64-bit HP port.
        "pynq": pynq,
        # Zynq UltraScale+ boards: VTA runs them at 333 MHz with a 128-bit AXI port.
        "ultra96": dataclasses.replace(pynq, target="ultra96", **zynq_mp),
        "zcu104": dataclasses.replace(pynq, target="zcu104", **zynq_mp),
        # Cyclone V SoC: 100 MHz, 64-bit HPS bridge.
        "de10nano": dataclasses.replace(pynq, target="de10nano"),
        # Exploration variants on the PYNQ board's memory system.  pynq_mul: VTA's pynq plus the ALU MUL
        # extension alone, to price the multiplier (LUT/DSP) that per-channel fixed-point requantization needs.
        "pynq_mul": dataclasses.replace(pynq, alu_mul=True),
        "1x8": dataclasses.replace(pynq, block_in=8, block_out=8, uop_buff_bytes=1 << 14,
                                   inp_buff_bytes=1 << 13, wgt_buff_bytes=1 << 16,
                                   acc_buff_bytes=1 << 15, **extended),
        "1x32": dataclasses.replace(pynq, block_in=32, block_out=32, inp_buff_bytes=1 << 16,
                                    wgt_buff_bytes=1 << 19, acc_buff_bytes=1 << 18, **extended),
        "2x16": dataclasses.replace(pynq, batch=2, inp_buff_bytes=1 << 16,
                                    acc_buff_bytes=1 << 18, **extended),
    }


PRESETS: dict[str, HwConfig] = _presets()
