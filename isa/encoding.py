"""Bit-exact encoding and decoding of instructions and micro-ops.

Single instructions go through `encode` / `decode`; whole programs through the
vectorised `encode_program` / `decode_program`, which pack one numpy column per
field so that 100k instructions take a fraction of a second.  `decode_columns`
gives the raw field columns without building objects; the simulators use it.
"""

from __future__ import annotations

from dataclasses import fields as dc_fields
from operator import attrgetter
from typing import Iterable, Sequence

import numpy as np

from vtakit.errors import IsaError
from vtakit.isa.config import HwConfig
from vtakit.isa.insn import INSN_TYPES, Alu, Finish, Gemm, Insn, Load, Store, Uop
from vtakit.isa.fields import (
    INSN_BYTES, Layout, alu_layout, finish_layout, gemm_layout, mem_layout, uop_layout,
)
from vtakit.isa.opcodes import AluOp, MemId, Opcode

# Dataclass attribute -> layout field, where the names differ.
_RENAMED = {"mem": "mem_id", "op": "alu_opcode"}
_BOOL_FIELDS = {"pop_prev", "pop_next", "push_prev", "push_next", "reset", "use_imm"}


def layout_for(opcode: int, cfg: HwConfig) -> Layout:
    """The field layout an opcode's instruction word uses."""
    if opcode in (Opcode.LOAD, Opcode.STORE):
        return mem_layout(cfg)
    if opcode == Opcode.GEMM:
        return gemm_layout(cfg)
    if opcode == Opcode.ALU:
        return alu_layout(cfg)
    if opcode == Opcode.FINISH:
        return finish_layout(cfg)
    raise IsaError(f"unknown opcode {opcode}", field="opcode")


def _attr_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dc_fields(cls))


_ATTRS = {cls: _attr_names(cls) for cls in INSN_TYPES}
_GETTERS = {cls: attrgetter(*names) for cls, names in _ATTRS.items()}


# ------------------------------------------------------------- single words
def encode(insn: Insn, cfg: HwConfig) -> bytes:
    """16 little-endian bytes of one instruction."""
    return encode_program([insn], cfg)


def decode(data: bytes, cfg: HwConfig) -> Insn:
    """The instruction in 16 bytes; IsaError for an unknown opcode or memory type."""
    if len(data) != INSN_BYTES:
        raise IsaError(f"an instruction is {INSN_BYTES} bytes, got {len(data)}")
    return decode_program(data, cfg)[0]


# ------------------------------------------------------------ word columns
def words_from_bytes(data: "bytes | np.ndarray") -> np.ndarray:
    """(n, 2) uint64 array of the low and high 64-bit units of each instruction."""
    raw = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) \
        else np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    if raw.size % INSN_BYTES:
        raise IsaError(f"program of {raw.size} bytes is not a whole number of {INSN_BYTES}-byte instructions")
    return raw.view("<u8").reshape(-1, 2).astype(np.uint64)


def extract(words: np.ndarray, field) -> np.ndarray:
    """One field of every word as int64 (sign-extended for signed fields)."""
    unit, shift = divmod(field.offset, 64)
    col = (words[:, unit] >> np.uint64(shift)) & np.uint64(field.mask)
    out = col.astype(np.int64)
    if field.signed:
        out = np.where(out > field.max, out - (1 << field.width), out)
    return out


def decode_columns(words: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """Every field of `layout` for every word, as int64 columns."""
    return {f.name: extract(words, f) for f in layout.fields}


def pack_columns(columns: dict[str, np.ndarray], layout: Layout, n: int,
                 index: np.ndarray | None = None) -> np.ndarray:
    """(n, 2) uint64 words from int64 columns; IsaError names the first out-of-range field."""
    words = np.zeros((n, 2), dtype=np.uint64)
    for f in layout.fields:
        col = np.asarray(columns.get(f.name, 0), dtype=np.int64)
        bad = (col < f.min) | (col > f.max)
        if np.any(bad):
            pos = int(np.flatnonzero(np.broadcast_to(bad, (n,)))[0])
            value = int(np.broadcast_to(col, (n,))[pos])
            at = int(index[pos]) if index is not None else pos
            raise IsaError(f"value {value} outside [{f.min}, {f.max}] ({f.width} bits"
                           f"{', signed' if f.signed else ''})", field=f.name, insn_index=at)
        unit, shift = divmod(f.offset, 64)
        words[:, unit] |= (col.astype(np.uint64) & np.uint64(f.mask)) << np.uint64(shift)
    return words


# ----------------------------------------------------------------- programs
def encode_program(insns: Sequence[Insn], cfg: HwConfig) -> bytes:
    """Encode a whole program, one numpy pass per instruction kind and field."""
    insns = list(insns)
    n = len(insns)
    words = np.zeros((n, 2), dtype=np.uint64)
    by_type: dict[type, list[int]] = {}
    for i, insn in enumerate(insns):
        by_type.setdefault(type(insn), []).append(i)
    for cls, idx in by_type.items():
        if cls not in _ATTRS:
            raise IsaError(f"not an instruction: {cls.__name__}", insn_index=idx[0])
        getter = _GETTERS[cls]
        rows = [getter(insns[i]) for i in idx]
        names = _ATTRS[cls]
        try:
            table = np.array(rows, dtype=np.int64).reshape(len(idx), len(names))
        except (TypeError, ValueError, OverflowError):
            _raise_bad_value(insns, idx, names)
        columns = {_RENAMED.get(a, a): table[:, k] for k, a in enumerate(names)}
        columns["opcode"] = np.full(len(idx), int(cls.opcode), dtype=np.int64)
        index = np.asarray(idx)
        words[index] = pack_columns(columns, layout_for(cls.opcode, cfg), len(idx), index)
    return words.astype("<u8").tobytes()


def _raise_bad_value(insns, idx, names) -> None:
    for i in idx:
        for a in names:
            v = getattr(insns[i], a)
            if not isinstance(v, (int, np.integer)):
                raise IsaError(f"must be an integer, got {v!r}", field=_RENAMED.get(a, a), insn_index=i)
            if not -(1 << 62) < int(v) < (1 << 62):
                raise IsaError(f"value {v} out of range", field=_RENAMED.get(a, a), insn_index=i)
    raise IsaError("malformed instruction values", insn_index=idx[0])


def decode_program(data: "bytes | np.ndarray", cfg: HwConfig) -> list[Insn]:
    """Instructions of a program image; IsaError names the first undecodable one."""
    words = words_from_bytes(data)
    n = len(words)
    opcode = extract(words, mem_layout(cfg)["opcode"])
    out: list[Insn | None] = [None] * n
    bad = np.flatnonzero(opcode > Opcode.ALU)
    if bad.size:
        i = int(bad[0])
        raise IsaError(f"unknown opcode {int(opcode[i])}", field="opcode", insn_index=i)
    for code, cls in _CLASS_OF.items():
        idx = np.flatnonzero(opcode == code)
        if idx.size == 0:
            continue
        cols = decode_columns(words[idx], layout_for(code, cfg))
        if cls in (Load, Store):
            _check_enum(cols["mem_id"], MemId, "mem_id", idx)
        if cls is Alu:
            _check_enum(cols["alu_opcode"], AluOp, "alu_opcode", idx)
        args = []
        for a in _ATTRS[cls]:
            col = cols[_RENAMED.get(a, a)].tolist()
            if a in _BOOL_FIELDS:
                col = [v != 0 for v in col]
            elif a == "mem":
                col = [_MEMS[v] for v in col]
            elif a == "op":
                col = [_ALUOPS[v] for v in col]
            args.append(col)
        for i, values in zip(idx.tolist(), zip(*args)):
            out[i] = cls(*values)
    return out  # type: ignore[return-value]


_CLASS_OF = {Opcode.LOAD: Load, Opcode.STORE: Store, Opcode.GEMM: Gemm, Opcode.ALU: Alu,
             Opcode.FINISH: Finish}
_MEMS = list(MemId)
_ALUOPS = list(AluOp)


def _check_enum(col: np.ndarray, enum, name: str, idx: np.ndarray) -> None:
    bad = np.flatnonzero(col >= len(enum))
    if bad.size:
        raise IsaError(f"unknown {name} {int(col[bad[0]])}", field=name, insn_index=int(idx[bad[0]]))


# ------------------------------------------------------------------ micro-ops
def encode_uops(uops: "Iterable[Uop] | np.ndarray", cfg: HwConfig) -> bytes:
    """32-bit little-endian micro-op words (from Uop objects or an (n, 3) dst/src/wgt array)."""
    if isinstance(uops, np.ndarray):
        table = uops.astype(np.int64).reshape(-1, 3)
    else:
        table = np.array([(u.dst, u.src, u.wgt) for u in uops], dtype=np.int64).reshape(-1, 3)
    return uop_words(table, cfg).astype("<u4").tobytes()


def uop_words(table: np.ndarray, cfg: HwConfig) -> np.ndarray:
    """uint32 words from an (n, 3) array of dst, src, wgt indices."""
    layout = uop_layout(cfg)
    words = np.zeros(len(table), dtype=np.uint64)
    for k, f in enumerate(layout.fields):
        col = table[:, k]
        bad = np.flatnonzero((col < 0) | (col > f.max))
        if bad.size:
            raise IsaError(f"micro-op {int(bad[0])}: value {int(col[bad[0]])} outside [0, {f.max}]",
                           field=f.name)
        words |= col.astype(np.uint64) << np.uint64(f.offset)
    return words.astype(np.uint32)


def uop_columns(words: np.ndarray, cfg: HwConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dst, src, wgt index arrays (int64) of uint32 micro-op words."""
    w = np.asarray(words, dtype=np.uint32).astype(np.int64)
    layout = uop_layout(cfg)
    return tuple((w >> f.offset) & f.mask for f in layout.fields)  # type: ignore[return-value]


def decode_uops(data: "bytes | np.ndarray", cfg: HwConfig) -> list[Uop]:
    raw = np.frombuffer(bytes(data), dtype="<u4") if isinstance(data, (bytes, bytearray)) \
        else np.asarray(data, dtype=np.uint32)
    dst, src, wgt = uop_columns(raw, cfg)
    return [Uop(d, s, w) for d, s, w in zip(dst.tolist(), src.tolist(), wgt.tolist())]
