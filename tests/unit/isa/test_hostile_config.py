"""Configuration files as untrusted input (issue 37, cause 13): sane limits on every numeric field,
standard JSON only (no NaN or Infinity, read or written), and one ConfigError for any broken file."""

import json
import math

import pytest

from vtakit.errors import ConfigError
from vtakit.isa.config import MAX_BUFF_BYTES, PRESETS, HwConfig
from vtakit.isa.config_io import MAX_CONFIG_FILE_BYTES

PYNQ = HwConfig.preset("pynq")


@pytest.mark.parametrize("changes, field", [
    # 512 GiB of weights: the 16-bit sram_base bounds the depth, so a huge block passed before and `sim`
    # crashed allocating it.
    ({"block_in": 1 << 14, "block_out": 1 << 14, "wgt_buff_bytes": 512 << 30}, "wgt_buff_bytes"),
    ({"inp_buff_bytes": MAX_BUFF_BYTES * 2, "block_in": 1 << 12}, "inp_buff_bytes"),
    ({"clock_mhz": math.inf}, "clock_mhz"),
    ({"clock_mhz": -math.inf}, "clock_mhz"),
    ({"clock_mhz": math.nan}, "clock_mhz"),
    ({"clock_mhz": -100.0}, "clock_mhz"),
    ({"clock_mhz": 10 ** 400}, "clock_mhz"),           # an int no float holds
    ({"mem_latency": 10 ** 30}, "mem_latency"),
    ({"cmd_queue_depth": 10 ** 12}, "cmd_queue_depth"),
    ({"token_queue_depth": 1 << 40}, "token_queue_depth"),
    ({"gemm_pipeline": 10 ** 9}, "gemm_pipeline"),
    ({"alu_ii": 1 << 20}, "alu_ii"),
    ({"batch": 1 << 200}, "batch"),
    ({"target": "x" * 1_000_000}, "target"),
    ({"target": "pynq\n; rm -rf /"}, "target"),
])
def test_out_of_range_fields_are_refused_by_name(changes, field):
    with pytest.raises(ConfigError) as e:
        HwConfig.from_dict({"preset": "pynq", **changes})
    assert e.value.field == field and len(str(e.value)) < 300


def test_the_presets_and_exploration_sizes_still_pass():
    for cfg in PRESETS.values():
        assert HwConfig.from_dict(json.loads(cfg.to_json())) == cfg
    big = PYNQ.replace(clock_mhz=250, mem_latency=64, block_in=128, block_out=128, wgt_buff_bytes=1 << 24)
    assert big.wgt_depth == 1024                          # a 16 MiB weight buffer is fine


@pytest.mark.parametrize("constant", ["Infinity", "-Infinity", "NaN"])
def test_non_standard_json_numbers_are_refused(tmp_path, constant):
    path = tmp_path / "c.json"
    path.write_text('{"clock_mhz": %s}' % constant)
    with pytest.raises(ConfigError, match=f"c.json: {constant} is not a number JSON allows"):
        HwConfig.from_json(path)


def test_overflowing_json_number_is_refused_by_field(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"clock_mhz": 1e999}')                   # json reads it as inf
    with pytest.raises(ConfigError, match=r"clock_mhz.*finite number.* \(in .*c.json\)"):
        HwConfig.from_json(path)


def test_written_json_is_standard():
    """to_json wrote `Infinity` for a clock it had accepted; validation now stops that, and the writer
    refuses non-finite numbers even for a config built around validation."""
    broken = HwConfig()
    object.__setattr__(broken, "clock_mhz", math.inf)
    with pytest.raises(ValueError):
        broken.to_json()


@pytest.mark.parametrize("content, message", [
    (b'{"target": "\xff\xfe"}', r"not UTF-8 text \(byte 0xff at offset 12\)"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (b'{"batch": 1' + b"0" * 5000 + b"}", "not valid JSON"),
    (b'{"TARGET": ["pynq"]}', "TARGET"),
    (b'{"preset": {"a": 1}}', "preset"),
    (b'{"LOG_BLOCK": 1e300}', "LOG_BLOCK"),
    (b"[1, 2]", "must be a JSON object"),
    (b" " * (MAX_CONFIG_FILE_BYTES + 1), "not a configuration"),
])
def test_broken_files_are_one_config_error(tmp_path, content, message):
    path = tmp_path / "c.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as e:
        HwConfig.from_json(path)
    assert len(str(e.value)) < 300 and "\n" not in str(e.value)


def test_a_folder_is_not_a_config_file(tmp_path):
    folder = tmp_path / "c.json"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is not a regular file"):
        HwConfig.from_json(folder)


def test_a_name_too_long_for_the_file_system_is_an_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset"):
        HwConfig.load("p" * 120_000)
