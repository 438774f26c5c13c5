"""`vtakit sim` and `vtakit disasm` on hostile and broken inputs (issue 37, causes 7 and 13):
one error line, never a hang, a silent truncation or a missing output folder."""

import numpy as np

import vtakit.cli.tools as tools
from vtakit.cli import main
from vtakit.isa import Finish, Gemm, HwConfig, Load, MemId, Store, encode
from vtakit.isa.asm import disasm
from vtakit.isa.image import ProgramImage

from tests.support.no_hang import no_hang
from tests.support.small_programs import small_image

PYNQ = HwConfig.preset("pynq")


def _save(img, path):
    img.save(path)
    return str(path)


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "internal error" not in err, err
    return err


def test_sim_refuses_maximal_loops_and_honours_timeout(tmp_path, capsys):
    prog = _save(small_image([Gemm(0, 8192, iter_out=16383, iter_in=16383), Finish()]), tmp_path / "big.npz")
    for device in ("functional", "cycle"):
        with no_hang():
            assert main(["sim", prog, "--device", device]) == 1
        err = _error(capsys)
        assert "micro-ops" in err and "--timeout" in err
    with no_hang():
        assert main(["sim", prog, "--device", "functional", "--timeout", "0.2"]) == 1
    assert "time limit" in _error(capsys)
    assert main(["sim", prog, "--timeout", "0"]) == 1
    assert "--timeout must be a positive" in _error(capsys)


def test_sim_reports_a_store_left_waiting_at_finish(tmp_path, capsys):
    prog = _save(small_image([Store(MemId.OUT, 0, 0, 1, 1, 1, pop_prev=True), Finish()]), tmp_path / "p.npz")
    assert main(["sim", prog, "--device", "functional"]) == 1
    err = _error(capsys)
    assert "deadlock" in err and "instruction 0 (STORE.OUT)" in err


def test_sim_creates_output_folders(tmp_path, capsys):
    prog = _save(small_image([Load(MemId.INP, 0, 0, 1, 1, 1), Finish()]), tmp_path / "p.npz")
    out, trace = tmp_path / "a" / "b" / "dram.npz", tmp_path / "c" / "d" / "t.json"
    assert main(["sim", prog, "-o", str(out), "--trace", str(trace)]) == 0
    assert out.exists() and trace.exists()
    with np.load(out) as z:
        assert z["dram"].dtype == np.uint8
    (tmp_path / "file").write_text("")
    assert main(["sim", prog, "-o", str(tmp_path / "file" / "dram.npz")]) == 1
    assert "cannot create the folder" in _error(capsys)


def test_asm_creates_output_folders(tmp_path, capsys):
    source = tmp_path / "p.s"
    source.write_text("FINISH\n")
    out = tmp_path / "x" / "y" / "p.bin"
    assert main(["asm", str(source), "-o", str(out)]) == 0
    assert out.read_bytes() == encode(Finish(), PYNQ)


def _instructions(n: int) -> list:
    return [Load(MemId.INP, i % 7, 0, 1, 1, 1) if i % 2 else Gemm(0, 0) for i in range(n - 1)] + [Finish()]


def test_disasm_streams_in_chunks_and_lists_everything(tmp_path, capsys, monkeypatch):
    img = small_image(_instructions(11))
    code = img.insn_bytes()
    binary = tmp_path / "p.bin"
    binary.write_bytes(code)
    monkeypatch.setattr(tools, "DISASM_CHUNK", 3)
    assert main(["disasm", str(binary)]) == 0
    assert capsys.readouterr().out == disasm(code, PYNQ)
    assert main(["disasm", _save(img, tmp_path / "p.npz")]) == 0
    assert capsys.readouterr().out == disasm(code, PYNQ)


def test_disasm_names_the_bad_instruction_in_a_later_chunk(tmp_path, capsys, monkeypatch):
    code = bytearray(small_image(_instructions(11)).insn_bytes())
    code[16 * 7] = (code[16 * 7] & ~0b111) | 7                  # unknown opcode at instruction 7
    binary = tmp_path / "p.bin"
    binary.write_bytes(bytes(code))
    monkeypatch.setattr(tools, "DISASM_CHUNK", 3)
    assert main(["disasm", str(binary)]) == 1
    assert "instruction 7" in _error(capsys)


def test_disasm_refuses_instead_of_truncating(tmp_path, capsys):
    img = small_image(_instructions(5))
    cut = ProgramImage(img.config, img.dram[:img.insn_addr + 3 * 16].copy(), img.insn_addr, img.insn_count)
    assert main(["disasm", _save(cut, tmp_path / "cut.npz")]) == 1
    assert "reach past the end" in _error(capsys)
    binary = tmp_path / "odd.bin"
    binary.write_bytes(img.insn_bytes() + b"\x01\x02\x03")
    assert main(["disasm", str(binary)]) == 1
    assert "3 bytes left over" in _error(capsys)
