"""Program images: building, saving and loading the .npz format."""

import numpy as np
import pytest

from vtakit.errors import IsaError
from vtakit.isa import Finish, HwConfig, Load, MemId, Uop
from vtakit.isa.image import ProgramBuilder, ProgramImage


def test_builder_layout_and_npz_round_trip(tmp_path):
    cfg = HwConfig.preset("2x16")
    b = ProgramBuilder(cfg, name="t")
    x = np.arange(3 * 2 * 16, dtype=np.int8).reshape(3, 2, 16)
    xa = b.place_elems(MemId.INP, x, name="x")
    wa = b.place_elems(MemId.WGT, np.ones((2, 16, 16), np.int8))
    ua = b.place_uops([Uop(1, 2, 3)])
    oa = b.reserve_elems(MemId.OUT, 5, name="y", shape=(5, 2, 16), dtype="|i1")
    b.emit(Load(MemId.INP, 0, xa, 1, 3, 3), Finish())
    img = b.build()
    assert wa * cfg.elem_bytes(MemId.WGT) % cfg.elem_bytes(MemId.WGT) == 0
    assert img.insn_addr % 16 == 0 and img.insn_count == 2 and img.dram.size % 4096 == 0
    assert (img.read("x") == x).all()
    assert int.from_bytes(img.dram[ua * 4:ua * 4 + 4].tobytes(), "little") == 1 | (2 << 11) | (3 << 22)
    assert img.regions["y"].addr == oa * cfg.elem_bytes(MemId.OUT)
    path = tmp_path / "p.npz"
    img.save(path)
    back = ProgramImage.load(path)
    assert back.config == cfg and back.name == "t"
    assert (back.dram == img.dram).all()
    assert back.instructions() == img.instructions()
    assert back.regions == img.regions


def test_load_errors(tmp_path):
    with pytest.raises(IsaError, match="does not exist"):
        ProgramImage.load(tmp_path / "none.npz")
    np.savez(tmp_path / "bad.npz", dram=np.zeros(4, np.uint8))
    with pytest.raises(IsaError, match="lacks 'format'"):
        ProgramImage.load(tmp_path / "bad.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(IsaError, match="not a program image"):
        ProgramImage.load(tmp_path / "junk.npz")
    img = ProgramBuilder(HwConfig.preset("pynq")).build()
    with pytest.raises(IsaError, match="no region 'out'"):
        img.read("out")


def test_place_elems_checks_whole_elements():
    b = ProgramBuilder(HwConfig.preset("pynq"))
    with pytest.raises(IsaError, match="whole number"):
        b.place_elems(MemId.INP, np.zeros(10, np.int8))
