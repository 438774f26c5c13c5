"""Assembly text as untrusted input (issue 37, cause 13): one IsaError naming the line, never a traceback,
a silently changed value or a megabyte error message."""

import pytest

from vtakit.cli import main
from vtakit.errors import IsaError
from vtakit.isa import HwConfig
from vtakit.isa.asm import MAX_LINE_CHARS, asm

PYNQ = HwConfig.preset("pynq")
OK = "LOAD.INP sram=0 dram=0 y=1 x=1 stride=1\n"


@pytest.mark.parametrize("line, message", [
    # out of range for the configuration: named by instruction index only before, not by line
    ("LOAD.INP sram=70000 dram=0 y=1 x=1 stride=1", "line 3, field 'sram_base': value 70000 outside"),
    ("LOAD.INP sram=-1 dram=0 y=1 x=1 stride=1", "line 3, field 'sram_base': value -1 outside"),
    ("LOAD.INP sram=0 dram=0 y=1 x=1 stride=99999999999999999999999", "line 3, field 'x_stride'"),
    ("ALU.ADD uop=0:1 imm=99999999999", "line 3, field 'imm'"),
    # flags that took any integer as true
    ("GEMM uop=0:1 reset=5", "line 3: reset='5' must be 0 or 1"),
    ("ALU.ADD uop=0:1 imm=1 use_imm=-1", "line 3: use_imm='-1' must be 0 or 1"),
    # digits of other scripts that int() reads
    ("GEMM uop=\u0661:\u0662", "line 3: uop='\u0661' is not an integer"),
    ("LOAD.INP sram=0 dram=" + "9" * 5000 + " y=1 x=1 stride=1", "line 3: dram='999"),
    ("FROB x=1", "line 3: unknown mnemonic 'FROB'"),
    ("ALU.__CLASS__ uop=0:1", "line 3: unknown ALU operation"),
    ("LOAD.INP sram=0 dram=0 y=1 x=1 stride=" + "x" * 60_000, "line 3: stride='xxx"),
])
def test_hostile_lines_name_the_line(line, message):
    with pytest.raises(IsaError, match=message.replace("(", r"\(")) as e:
        asm(f"; header\n{OK}{line}\nFINISH\n", PYNQ)
    assert e.value.line == 3 and len(str(e.value)) < 200


def test_megabyte_line_is_refused_by_length():
    with pytest.raises(IsaError, match=f"line 2: 1,000,000 characters long.*at most {MAX_LINE_CHARS:,}"):
        asm(OK + "x" * 1_000_000 + "\nFINISH\n", PYNQ)


def test_bytes_that_are_not_utf8_name_the_line():
    with pytest.raises(IsaError, match=r"line 2: not UTF-8 text \(byte 0xff at column 8\)"):
        asm(OK.encode() + b"FINISH \xff\xfe\n", PYNQ)
    assert asm(OK.encode() + "FINISH ; caf\u00e9\r\n".encode(), PYNQ) == asm(OK + "FINISH\n", PYNQ)


def test_cli_asm_of_a_hostile_file_is_one_error_line(tmp_path, capsys):
    """`vtakit asm` read the file as text: a stray byte was a UnicodeDecodeError traceback."""
    source = tmp_path / "p.s"
    source.write_bytes(OK.encode() + b"GEMM uop=0:1 \x80\nFINISH\n")
    assert main(["asm", str(source)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: line 2: not UTF-8 text (byte 0x80 at column 14)"]
