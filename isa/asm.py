"""Text assembler and disassembler.

A listing line reads

    12  compute  GEMM       uop=5:77 iter=3x9 dst=100,7 src=33,2 wgt=511,1  pop=prev push=next

index, module, mnemonic, fields by name, dependency flags.  The index and module
columns are optional on input (checked when present), `;` or `#` start a comment,
and `asm(disasm(p), cfg) == p` for every program.

Source text is untrusted: whatever is wrong with it (bytes that are not UTF-8,
a megabyte line, a number of a thousand digits, a field out of range for the
configuration) is one IsaError naming the line, with the bad value cut short.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from vtakit.errors import IsaError
from vtakit.isa.config import HwConfig
from vtakit.isa.encoding import decode_program, decode_uops, encode_program
from vtakit.isa.insn import Alu, Finish, Gemm, Insn, Load, Store
from vtakit.isa.opcodes import MEM_MNEMONIC, AluOp, MemId, Module

_MEM_BY_MNEMONIC = {v: k for k, v in MEM_MNEMONIC.items()}
_MODULE_NAMES = {m.label for m in Module}

MAX_LINE_CHARS = 1 << 16
"""A listing line is about 100 characters; one far longer is not a line of a listing."""
MAX_NUMBER_CHARS = 40
"""Every field fits 64 bits: 0x plus 16 hex digits, or 20 decimal ones, with room for '_' and a sign."""


def _show(text: str, limit: int = 40) -> str:
    """A piece of the source for an error message, cut short."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


# ---------------------------------------------------------------- disassembly
def format_insn(insn: Insn) -> str:
    """Mnemonic and fields of one instruction (no index or module column)."""
    if isinstance(insn, (Load, Store)):
        body = (f"sram={insn.sram_base} dram={insn.dram_base:#x} y={insn.y_size} x={insn.x_size} "
                f"stride={insn.x_stride} pad={insn.y_pad_0},{insn.y_pad_1},{insn.x_pad_0},{insn.x_pad_1}")
    elif isinstance(insn, (Gemm, Alu)):
        body = (f"uop={insn.uop_bgn}:{insn.uop_end} iter={insn.iter_out}x{insn.iter_in} "
                f"dst={insn.dst_factor_out},{insn.dst_factor_in} "
                f"src={insn.src_factor_out},{insn.src_factor_in}")
        if isinstance(insn, Gemm):
            body += f" wgt={insn.wgt_factor_out},{insn.wgt_factor_in}"
        else:
            if insn.use_imm:
                body += f" imm={insn.imm}"
            elif insn.imm:
                body += f" imm={insn.imm} use_imm=0"
        if insn.reset:
            body += " reset=1"
    else:
        body = ""
    deps = []
    pops = [n for n, f in (("prev", insn.pop_prev), ("next", insn.pop_next)) if f]
    pushes = [n for n, f in (("prev", insn.push_prev), ("next", insn.push_next)) if f]
    if pops:
        deps.append("pop=" + ",".join(pops))
    if pushes:
        deps.append("push=" + ",".join(pushes))
    text = f"{insn.mnemonic:<10} {body}"
    if deps:
        text = f"{text:<78} {' '.join(deps)}"
    return text.rstrip()


def disasm(
    program: "bytes | np.ndarray | Sequence[Insn]",
    cfg: HwConfig,
    *,
    start: int = 0,
    header: bool = True,
    uop_source: "Callable[[Insn], bytes] | None" = None,
) -> str:
    """A listing of a program; `uop_source(insn)` may supply the bytes a LOAD.UOP reads."""
    insns = list(program) if not isinstance(program, (bytes, bytearray, np.ndarray)) \
        else decode_program(program, cfg)
    lines = []
    if header:
        lines.append(f"; vtakit listing  config={cfg.label}  instructions={len(insns)}")
    for i, insn in enumerate(insns, start):
        lines.append(f"{i:6d}  {insn.module.label:<8} {format_insn(insn)}")
        if uop_source is not None and isinstance(insn, Load) and insn.mem == MemId.UOP:
            for k, u in enumerate(decode_uops(uop_source(insn), cfg)):
                lines.append(f";{'':14}uop[{insn.sram_base + k}] dst={u.dst} src={u.src} wgt={u.wgt}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- assembly
def asm(text: "str | bytes", cfg: HwConfig | None = None) -> list[Insn]:
    """Parse a listing back into instructions; with `cfg`, every field is range-checked too.

    `text` may be the file's bytes: a line that is not UTF-8 is then an error naming it."""
    insns: list[Insn] = []
    linenos: list[int] = []
    for lineno, raw in enumerate(_lines(text), 1):
        if len(raw) > MAX_LINE_CHARS:
            raise IsaError(f"{len(raw):,} characters long, not a listing line (at most {MAX_LINE_CHARS:,})",
                           line=lineno)
        if isinstance(raw, bytes):
            raw = _decode(raw, lineno)
        line = raw.split(";", 1)[0].split("#", 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        if tokens[0].isascii() and tokens[0].isdigit():
            tokens = tokens[1:]
        module = None
        if tokens and tokens[0].lower() in _MODULE_NAMES:
            module = tokens[0].lower()
            tokens = tokens[1:]
        if not tokens:
            raise IsaError("no mnemonic", line=lineno)
        insn = _parse(tokens[0].upper(), tokens[1:], lineno)
        if module is not None and insn.module.label != module:
            raise IsaError(f"{insn.mnemonic} runs on the {insn.module.label} module, not {module}",
                           line=lineno)
        insns.append(insn)
        linenos.append(lineno)
    if cfg is not None:
        try:
            encode_program(insns, cfg)
        except IsaError as e:
            if e.insn_index is None:
                raise
            raise IsaError(e.detail, field=e.field, line=linenos[e.insn_index]) from None
    return insns


def _lines(text: "str | bytes") -> "list[str] | list[bytes]":
    """The source's lines, split on newlines only (as editors number them), a final CR dropped."""
    if isinstance(text, (bytes, bytearray)):
        return [line.removesuffix(b"\r") for line in bytes(text).split(b"\n")]
    return [line.removesuffix("\r") for line in text.split("\n")]


def _decode(raw: bytes, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise IsaError(f"not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})", line=lineno) from None


def _parse(mnemonic: str, args: list[str], lineno: int) -> Insn:
    kv: dict[str, str] = {}
    for tok in args:
        if "=" not in tok:
            raise IsaError(f"expected key=value, got {_show(tok)}", line=lineno)
        key, value = tok.split("=", 1)
        if key in kv:
            raise IsaError(f"{_show(key)} given twice", line=lineno)
        kv[key] = value
    deps = _take_deps(kv, lineno)
    head, _, suffix = mnemonic.partition(".")
    if head in ("LOAD", "STORE"):
        if suffix not in _MEM_BY_MNEMONIC:
            raise IsaError(f"unknown memory type {_show(suffix)} in {_show(mnemonic)}", line=lineno)
        pads = _ints(kv.pop("pad", "0,0,0,0"), 4, "pad", lineno)
        fields = dict(
            mem=_MEM_BY_MNEMONIC[suffix],
            sram_base=_int(_require(kv, "sram", lineno), "sram", lineno),
            dram_base=_int(_require(kv, "dram", lineno), "dram", lineno),
            y_size=_int(_require(kv, "y", lineno), "y", lineno),
            x_size=_int(_require(kv, "x", lineno), "x", lineno),
            x_stride=_int(_require(kv, "stride", lineno), "stride", lineno),
            y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3],
        )
        cls = Load if head == "LOAD" else Store
        insn = cls(**fields, **deps)
    elif head in ("GEMM", "ALU") and (head == "GEMM") == (suffix == ""):
        bgn, end = _ints(_require(kv, "uop", lineno), 2, "uop", lineno, sep=":")
        it_out, it_in = _ints(kv.pop("iter", "1x1"), 2, "iter", lineno, sep="x")
        dst = _ints(kv.pop("dst", "0,0"), 2, "dst", lineno)
        src = _ints(kv.pop("src", "0,0"), 2, "src", lineno)
        common = dict(uop_bgn=bgn, uop_end=end, iter_out=it_out, iter_in=it_in,
                      dst_factor_out=dst[0], dst_factor_in=dst[1],
                      src_factor_out=src[0], src_factor_in=src[1],
                      reset=_flag(kv.pop("reset", "0"), "reset", lineno))
        if head == "GEMM":
            wgt = _ints(kv.pop("wgt", "0,0"), 2, "wgt", lineno)
            insn = Gemm(**common, wgt_factor_out=wgt[0], wgt_factor_in=wgt[1], **deps)
        else:
            if suffix not in AluOp.__members__:
                raise IsaError(f"unknown ALU operation {_show(suffix)}", line=lineno)
            imm = kv.pop("imm", None)
            use_imm = _flag(kv.pop("use_imm", "1" if imm is not None else "0"), "use_imm", lineno)
            insn = Alu(op=AluOp[suffix], use_imm=use_imm,
                       imm=_int(imm, "imm", lineno) if imm is not None else 0, **common, **deps)
    elif mnemonic == "FINISH":
        insn = Finish(**deps)
    else:
        raise IsaError(f"unknown mnemonic {_show(mnemonic)}", line=lineno)
    if kv:
        raise IsaError(f"unknown field {_show(sorted(kv)[0])} for {mnemonic}", line=lineno)
    return insn


def _take_deps(kv: dict[str, str], lineno: int) -> dict[str, bool]:
    deps = dict(pop_prev=False, pop_next=False, push_prev=False, push_next=False)
    for kind in ("pop", "push"):
        if kind in kv:
            for side in kv.pop(kind).split(","):
                if side not in ("prev", "next"):
                    raise IsaError(f"{kind}= takes prev and/or next, got {_show(side)}", line=lineno)
                deps[f"{kind}_{side}"] = True
    return deps


def _require(kv: dict[str, str], key: str, lineno: int) -> str:
    if key not in kv:
        raise IsaError(f"missing field {key!r}", line=lineno)
    return kv.pop(key)


def _int(text: str, key: str, lineno: int) -> int:
    """An integer in Python's notation (0x.., 0b.., 1_000), ASCII digits only, at most 64 bits."""
    if len(text) > MAX_NUMBER_CHARS:
        raise IsaError(f"{key}={_show(text)} is too long for a number of any field", line=lineno)
    try:
        if not text.isascii():
            raise ValueError(text)
        return int(text, 0)
    except ValueError:
        raise IsaError(f"{key}={_show(text)} is not an integer", line=lineno) from None


def _flag(text: str, key: str, lineno: int) -> bool:
    value = _int(text, key, lineno)
    if value not in (0, 1):
        raise IsaError(f"{key}={_show(text)} must be 0 or 1", line=lineno)
    return bool(value)


def _ints(text: str, n: int, key: str, lineno: int, sep: str = ",") -> list[int]:
    parts = text.split(sep)
    if len(parts) != n:
        raise IsaError(f"{key}= takes {n} values separated by {sep!r}, got {_show(text)}", line=lineno)
    return [_int(p, key, lineno) for p in parts]


__all__ = ["asm", "disasm", "format_insn"]
