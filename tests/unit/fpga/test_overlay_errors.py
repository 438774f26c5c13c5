"""A missing or mismatched bitstream, .hwh or configuration is one clear DeviceError, before any run;
so is asking for the real board on a machine that has none."""

import json

import pytest

from vtakit.errors import ConfigError, DeviceError
from vtakit.hw.boards import BOARDS, board, board_for
from vtakit.fpga.driver import PynqDevice
from vtakit.fpga.overlay import find_overlay, overlay_files, read_bit_header, write_bit
from vtakit.fpga.regmap import RegisterMap, discover
from vtakit.fpga.simboard import SimBoard, simulated_pynq, write_sim_overlay
from vtakit.hw.synth import TARGET_PARTS
from vtakit.isa import HwConfig

PYNQ = HwConfig.preset("pynq")


def _one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


def _driver(cfg, bit, board_name="pynq-z1"):
    return PynqDevice(cfg, bit, board=board_name, device=SimBoard(board_name))


def test_missing_bitstream_and_hwh(tmp_path):
    with pytest.raises(DeviceError, match="not found") as e:
        _driver(PYNQ, tmp_path / "nothing.bit")
    _one_line(e)
    bit = write_sim_overlay(tmp_path, "pynq-z1", PYNQ)
    bit.with_suffix(".hwh").unlink()
    with pytest.raises(DeviceError, match=r"\.hwh is missing") as e:
        _driver(PYNQ, bit)
    _one_line(e)


def test_bitstream_for_another_config(tmp_path):
    bit = write_sim_overlay(tmp_path, "pynq-z1", PYNQ)
    other = HwConfig.preset("1x8")
    with pytest.raises(DeviceError, match="was built for config pynq") as e:
        _driver(other, bit)
    assert "1x8" in _one_line(e)
    # VTA's naming (no .json): the simulated bitstream still says what it carries
    hls = write_sim_overlay(tmp_path / "hls", "pynq-z1", PYNQ, "vta-hls")
    assert hls.name == PYNQ.bitstream_name + ".bit" and not hls.with_suffix(".json").exists()
    with pytest.raises(DeviceError, match="was built for config pynq"):
        _driver(other, hls)


def test_real_bitstream_without_config_must_have_vtas_name(tmp_path):
    sim = write_sim_overlay(tmp_path, "pynq-z1", PYNQ, "vta-hls")
    for name in ("mystery", PYNQ.bitstream_name):
        bit = write_bit(tmp_path / f"{name}.bit", name, "7z020clg400", bytes(64))   # no config inside
        bit.with_suffix(".hwh").write_text(sim.with_suffix(".hwh").read_text())
        if name == "mystery":
            with pytest.raises(DeviceError, match="not VTA's bitstream name") as e:
                _driver(PYNQ, bit)
            _one_line(e)
        else:   # named right: accepted by the driver; the simulated board then needs a config to build
            with pytest.raises(DeviceError, match="real bitstream"):
                _driver(PYNQ, bit)


def test_part_and_board_mismatch(tmp_path):
    bit = write_sim_overlay(tmp_path, "pynq-z1", PYNQ)
    with pytest.raises(DeviceError, match="is for part 7z020clg400, the Ultra96-V2") as e:
        PynqDevice(PYNQ, bit, board="ultra96-v2", device=SimBoard("ultra96-v2"))
    _one_line(e)
    with pytest.raises(DeviceError, match="built for the pynq-z1 board, not the pynq-z2"):
        _driver(PYNQ, bit, "pynq-z2")


def test_garbage_files(tmp_path):
    bit = tmp_path / "junk.bit"
    bit.write_bytes(b"\x00\x09not a bitstream")
    bit.with_suffix(".hwh").write_text("<EDKSYSTEM/>")
    with pytest.raises(DeviceError, match="not a Xilinx bitstream"):
        read_bit_header(bit)
    good = write_sim_overlay(tmp_path / "g", "pynq-z1", PYNQ)
    good.with_suffix(".json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(DeviceError, match="not a vtakit overlay description"):
        _driver(PYNQ, good)
    good = write_sim_overlay(tmp_path / "h", "pynq-z1", PYNQ)
    good.with_suffix(".hwh").write_text("<EDKSYSTEM><MODULES/></EDKSYSTEM>")
    with pytest.raises(DeviceError, match="pynq cannot parse"):
        _driver(PYNQ, good)


def test_overlay_without_an_accelerator():
    with pytest.raises(DeviceError, match="no \\(or more than one\\) VTA accelerator") as e:
        discover({"axi_dma_0": {"type": "xilinx.com:ip:axi_dma:7.1", "phys_addr": 0x40400000}})
    assert "axi_dma_0" in _one_line(e)
    hls = {f"{m}_0": {"type": f"xilinx.com:hls:{m}:1.0", "phys_addr": 0x43C00000 + 0x1000 * k}
           for k, m in enumerate(("fetch", "load", "compute", "store"))}
    assert discover(hls) == RegisterMap.vta_hls(0x43C00000, 0x43C01000, 0x43C02000, 0x43C03000)
    del hls["store_0"]
    with pytest.raises(DeviceError):
        discover(hls)


def test_no_board_on_this_machine(monkeypatch, tmp_path):
    """Here pynq finds no device: `--device pynq` says so instead of failing somewhere deeper."""
    with pytest.raises(DeviceError, match="no PYNQ board here") as e:
        PynqDevice(PYNQ)
    assert "pynq-sim" in _one_line(e)
    monkeypatch.delenv("VTAKIT_OVERLAY", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DeviceError, match="no overlay for config pynq"):
        find_overlay(PYNQ)
    bit = write_sim_overlay(tmp_path / ".vtakit" / "overlays", "pynq-z1", PYNQ)
    assert find_overlay(PYNQ) == bit


def test_board_presets_agree_with_configs_and_synthesis_parts():
    for b in BOARDS.values():
        cfg = b.config
        assert b.device == TARGET_PARTS[cfg.target]
        assert (b.clock_mhz, b.bus_bits) == (cfg.clock_mhz, cfg.bus_bytes * 8)
        assert b.register_base % (1 << 16) == 0 and board(b.name) is b
    assert board_for(PYNQ).name == "pynq-z1" and board_for(HwConfig.preset("zcu104")).name == "zcu104"
    with pytest.raises(ConfigError, match="at most 64 bits"):
        board("pynq-z1").check_config(HwConfig.preset("ultra96"))
    with pytest.raises(ConfigError, match="unknown board"):
        board("de10-nano")
    with pytest.raises(ConfigError, match="at most 64 bits"):
        simulated_pynq(HwConfig.preset("ultra96"), "pynq-z2")


def test_overlay_files_by_stem(tmp_path):
    bit = write_sim_overlay(tmp_path, "zcu104", HwConfig.preset("zcu104"))
    files = overlay_files(tmp_path / bit.stem)
    assert files.bit == bit and files.sidecar is not None and files.hwh.suffix == ".hwh"
    assert read_bit_header(bit)["part"] == "zu7evffvc1156"


def test_hwh_fingerprint_catches_a_renamed_bitstream(tmp_path):
    """A vtakit bitstream renamed to VTA's name for another config, its .json lost: the IP parameter
    in the .hwh still names the configuration it was generated for."""
    other = HwConfig.preset("1x8")
    sim = write_sim_overlay(tmp_path / "src", "pynq-z1", PYNQ)
    bit = write_bit(tmp_path / f"{other.bitstream_name}.bit", other.bitstream_name, "7z020clg400", bytes(64))
    bit.with_suffix(".hwh").write_text(sim.with_suffix(".hwh").read_text())
    with pytest.raises(DeviceError, match="IP vta_0 was generated for config pynq") as e:
        PynqDevice(other, bit, board="pynq-z1", device=SimBoard("pynq-z1"), download=False)
    _one_line(e)


def test_an_unknown_overlay_flavour_is_one_error(tmp_path):
    """Not silently VTA's HLS file naming: the flavour names the register layout the driver expects."""
    with pytest.raises(DeviceError, match="unknown overlay flavour 'vta-hsl'"):
        write_sim_overlay(tmp_path, "pynq-z1", PYNQ, flavour="vta-hsl")
    assert not any(tmp_path.iterdir())
