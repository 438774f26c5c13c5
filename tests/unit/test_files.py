"""Paths users name: FIFOs, devices, oversized files and archive bombs are one error line, never a
hang or an allocation that exhausts memory (vtakit/files.py and the loaders that use it)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vtakit.cli import main
from vtakit.errors import IsaError, VtaError
from vtakit.files import check_archive, make_parent, read_limited, regular_file
from vtakit.isa import image as image_module
from vtakit.isa.config import HwConfig
from vtakit.isa.image import ProgramBuilder, ProgramImage


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("argv", [
    ["sim", "{fifo}"], ["disasm", "{fifo}"], ["disasm", "/dev/zero"], ["asm", "{fifo}"],
    ["config", "{fifo}"], ["bench", "conv2d", "--layers", "C10", "--tuning-log", "{fifo}"],
])
def test_a_fifo_or_device_is_refused_before_it_is_opened(argv, fifo, capsys):
    assert main([a.format(fifo=fifo) for a in argv]) == 1
    assert "not a regular file" in _one_error(capsys)


def test_sizes_are_checked_before_reading(tmp_path):
    sparse = tmp_path / "sparse.s"
    with open(sparse, "wb") as f:
        f.truncate(1 << 33)  # 8 GiB, no disk used
    with pytest.raises(VtaError, match="8,589,934,592 bytes, more than the 1 MiB"):
        read_limited(sparse, "assembly source", 1 << 20)
    made = make_parent(tmp_path / "new" / "a.s", "listing")
    made.write_text("ok")
    assert read_limited(made, "listing", 10) == b"ok" and regular_file(made, "listing") == made


def test_a_program_image_that_expands_too_far_is_refused(tmp_path, monkeypatch):
    img = ProgramBuilder(HwConfig.preset("pynq")).build()
    img.save(tmp_path / "p.npz")
    assert ProgramImage.load(tmp_path / "p.npz").insn_count == img.insn_count
    monkeypatch.setattr(image_module, "MAX_IMAGE_BYTES", 1024)
    with pytest.raises(IsaError, match="expands to .* more than the 0 MiB"):
        ProgramImage.load(tmp_path / "p.npz")
    np.save(tmp_path / "plain.npy", np.zeros(4))
    with pytest.raises(IsaError):
        check_archive(tmp_path / "plain.npy", "program image", 1 << 20, IsaError)


def test_compile_op_makes_its_output_folders(tmp_path, capsys):
    out, listing = tmp_path / "a" / "p.npz", tmp_path / "b" / "p.s"
    assert main(["compile-op", "conv2d", "--input", "1,16,8,8", "--kernel", "16,3,3", "-o", str(out),
                 "--asm", str(listing)]) == 0
    assert out.is_file() and listing.read_text().strip()


def test_an_infinite_timeout_is_refused(tmp_path, capsys):
    ProgramBuilder(HwConfig.preset("pynq")).build().save(tmp_path / "p.npz")
    assert main(["sim", str(tmp_path / "p.npz"), "--timeout", "inf"]) == 1
    assert "--timeout must be a positive number" in _one_error(capsys)


def test_a_program_image_with_garbage_fields_is_one_isa_error(tmp_path):
    img = ProgramBuilder(HwConfig.preset("pynq")).build()
    img.save(tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz") as z:
        fields = {k: z[k] for k in z.files}
    for key, value in (("config", "{not json"), ("regions", "[1, 2]"), ("regions", '{"a": {"addr": "x"}}')):
        np.savez(tmp_path / "bad.npz", **dict(fields, **{key: np.array(value)}))
        with pytest.raises(IsaError, match="bad.npz: "):
            ProgramImage.load(tmp_path / "bad.npz")
