"""HwConfig: presets, derived values, JSON formats and the errors of bad configs."""

import json

import pytest

from vtakit.errors import ConfigError
from vtakit.isa import PRESETS, HwConfig, MemId
from vtakit.isa.fields import alu_layout, gemm_layout, mem_layout, uop_layout


def test_pynq_is_vta_default():
    cfg = HwConfig.preset("pynq")
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 16, 16)
    assert (cfg.uop_depth, cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth) == (8192, 2048, 1024, 2048)
    assert (cfg.log_uop_depth, cfg.log_inp_depth, cfg.log_wgt_depth, cfg.log_acc_depth) == (13, 11, 10, 11)
    assert [cfg.elem_bytes(m) for m in MemId] == [4, 256, 16, 64, 16, 16]
    assert [f.width for f in uop_layout(cfg).fields] == [11, 11, 10]
    assert cfg.peak_macs_per_cycle == 256 and cfg.peak_gops == pytest.approx(51.2)
    assert cfg.bus_bytes == 8 and cfg.clock_mhz == 100
    assert cfg.shr_arg_bits == 5 and cfg.shr_max == 15  # VTA_SHR_ARG_BIT_WIDTH = LOG_ACC_WIDTH
    assert cfg.vta_semantics and not cfg.extensions


def test_pynq_gemm_layout_fills_both_units():
    layout = gemm_layout(HwConfig.preset("pynq"))
    first = [f for f in layout.fields if f.offset < 64]
    assert max(f.offset + f.width for f in first) == 63
    assert layout["dst_factor_out"].offset == 64
    assert layout.used_bits == 128


def test_mem_layout_skips_to_second_unit():
    layout = mem_layout(HwConfig.preset("pynq"))
    assert layout["dram_base"].offset == 26
    assert layout["y_size"].offset == 64
    assert layout["x_pad_1"].offset + layout["x_pad_1"].width == 128


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_valid_and_distinct(name):
    cfg = HwConfig.preset(name)
    assert cfg.preset_name == name
    for make in (mem_layout, gemm_layout, alu_layout):
        assert make(cfg).used_bits <= 128
    assert uop_layout(cfg).used_bits <= 32
    assert HwConfig.from_dict(json.loads(cfg.to_json())) == cfg


def test_exploration_variants_differ_in_shape():
    shapes = {(c.batch, c.block_in, c.block_out) for c in PRESETS.values()}
    assert len(shapes) >= 3
    assert HwConfig.preset("ultra96").bus_bytes == 16


def test_vta_json(tmp_path):
    vta = {"TARGET": "ultra96", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3,
           "LOG_ACC_WIDTH": 5, "LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_UOP_BUFF_SIZE": 15,
           "LOG_INP_BUFF_SIZE": 15, "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17,
           "ACC_DEP_DISTANCE": 3}
    path = tmp_path / "vta_config.json"
    path.write_text(json.dumps(vta))
    assert HwConfig.from_json(path) == HwConfig.preset("ultra96")
    vta.update(TARGET="sim", LOG_BLOCK=3, LOG_INP_BUFF_SIZE=13, LOG_WGT_BUFF_SIZE=16,
               LOG_ACC_BUFF_SIZE=15)
    path.write_text(json.dumps(vta))
    cfg = HwConfig.from_json(path)
    assert (cfg.block_in, cfg.block_out, cfg.inp_depth, cfg.target) == (8, 8, 1024, "sim")
    assert cfg.clock_mhz == 100  # unknown targets take the pynq board's figures


def test_vtakit_json_round_trip_and_overrides(tmp_path):
    cfg = HwConfig.preset("pynq").replace(bus_bytes=16, mem_latency=10)
    path = tmp_path / "c.json"
    cfg.to_json(path)
    assert HwConfig.from_json(path) == cfg
    assert HwConfig.load(str(path)) == cfg
    path.write_text(json.dumps({"preset": "1x8", "clock_mhz": 200}))
    assert HwConfig.from_json(path) == HwConfig.preset("1x8").replace(clock_mhz=200)
    assert cfg.fingerprint() != HwConfig.preset("pynq").fingerprint()


def test_semantic_fields_per_preset_and_in_json(tmp_path):
    """VTA presets have VTA's semantics, exploration presets every extension; the fields
    travel in vtakit's JSON (and so in every image and build key) and a VTA JSON gets VTA's."""
    for name in ("pynq", "ultra96", "zcu104", "de10nano"):
        cfg = HwConfig.preset(name)
        assert cfg.vta_semantics and cfg.shr_arg_bits == 5 and not cfg.store_from_acc
    for name in ("1x8", "1x32", "2x16"):
        cfg = HwConfig.preset(name)
        assert set(cfg.extensions) == {"alu_mul", "wgt_load_pad", "acc8_load", "alu_reset", "shr_wide",
                                       "store_from_acc"}
        assert cfg.shr_arg_bits == 6 and cfg.shr_max == 31
    custom = HwConfig.preset("pynq").replace(acc8_load=True, shr_wide=True)
    assert custom.extensions == ("acc8_load", "shr_wide") and not custom.vta_semantics
    assert custom.fingerprint() != HwConfig.preset("pynq").fingerprint()
    path = tmp_path / "c.json"
    custom.to_json(path)
    assert json.loads(path.read_text())["acc8_load"] is True
    assert HwConfig.from_json(path) == custom
    assert HwConfig.preset("pynq").replace(acc_bits=16, acc_buff_bytes=1 << 16).shr_arg_bits == 4  # as VTA


@pytest.mark.parametrize("changes, field", [
    ({"block_in": 12}, "block_in"),
    ({"batch": 3}, "batch"),
    ({"inp_bits": 4}, "inp_bits"),
    ({"acc_bits": 64}, "acc_bits"),
    ({"inp_buff_bytes": 8}, "inp_buff_bytes"),          # smaller than one element
    ({"wgt_buff_bytes": 3 << 16}, "wgt_buff_bytes"),    # not a power of two
    ({"inp_buff_bytes": 1 << 16}, "wgt_factor_in"),     # GEMM word overflows
    ({"inp_buff_bytes": 1 << 14, "wgt_buff_bytes": 1 << 19}, "wgt"),  # micro-op overflows 32 bits
    ({"bus_bytes": 6}, "bus_bytes"),
    ({"token_queue_depth": 0}, "token_queue_depth"),
    ({"clock_mhz": 0}, "clock_mhz"),
    ({"block_out": 16.0}, "block_out"),
    ({"acc8_load": 1}, "acc8_load"),                    # the semantic fields are booleans
    ({"store_from_acc": "yes"}, "store_from_acc"),
])
def test_bad_configs_name_the_field(changes, field):
    with pytest.raises(ConfigError) as e:
        HwConfig.preset("pynq").replace(**changes)
    assert e.value.field == field
    assert field in str(e.value)


def test_unknown_keys_and_presets(tmp_path):
    with pytest.raises(ConfigError, match="bogus"):
        HwConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="LOG_FOO"):
        HwConfig.from_dict({"LOG_FOO": 1, "TARGET": "pynq"})
    with pytest.raises(ConfigError, match="unknown preset"):
        HwConfig.preset("nope")
    with pytest.raises(ConfigError, match="parameter"):
        HwConfig.preset("pynq").replace(blocks=4)
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        HwConfig.from_json(path)
    with pytest.raises(ConfigError, match="does not exist"):
        HwConfig.from_json(tmp_path / "missing.json")
