"""`vtakit hw cosim|gen|build|synth` and the RTL through the compiler."""

import json

import numpy as np
import pytest

from vtakit.cli import main
from vtakit.compiler.backends.vta import ops, reference
from vtakit.compiler.backends.vta.layers import RESNET18
from vtakit.hw import cosim as cosim_module
from vtakit.hw.cosim import cosim
from vtakit.hw.gen import SOURCES, package_text
from vtakit.hw.synth import count_resources, part_for
from vtakit.isa import HwConfig
from vtakit.isa.fields import gemm_layout
from vtakit.sim.random_programs import random_program

PYNQ = HwConfig.preset("pynq")


@pytest.fixture(scope="module")
def conv_image(tmp_path_factory):
    path = tmp_path_factory.mktemp("cosim") / "conv.npz"
    assert main(["compile-op", "conv2d", "--input", "1,32,8,8", "--kernel", "32,3,3", "--pad", "1", "--bias",
                 "--shift", "6", "--clip", "0,127", "-o", str(path)]) == 0
    return path


def test_cosim_cli_agrees(conv_image, capsys):
    capsys.readouterr()
    assert main(["hw", "cosim", str(conv_image), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["agree"] and [r["model"] for r in report["runs"]] == ["functional", "cycle", "rtl"]
    assert abs(report["cycle_error"]) < 0.05
    assert main(["hw", "cosim", str(conv_image)]) == 0
    out = capsys.readouterr().out
    assert "bit-exact" in out and "cycle model vs RTL" in out
    assert main(["cosim", str(conv_image)]) == 2  # the spelling from before cosim joined `hw`
    assert capsys.readouterr().err == "error: `vtakit cosim` is now `vtakit hw cosim` (same options)\n"


def test_cosim_names_the_first_mismatch(monkeypatch):
    """A corrupted RTL result is traced back to its STORE, buffer entry and lane."""
    image = random_program(PYNQ, 0)
    real_run = cosim_module.run_image
    first = {}

    def corrupted(img, model, timeout_s=None):
        stats, dram = real_run(img, model=model, timeout_s=timeout_s)
        if model == "functional":
            first["dram"] = dram
        if model == "rtl":
            changed = np.flatnonzero(dram != img.dram)     # bytes the program stored
            byte = int(changed[len(changed) // 2])
            first["byte"] = byte
            dram[byte] ^= 0x5A
        return stats, dram

    monkeypatch.setattr(cosim_module, "run_image", corrupted)
    report = cosim(image)
    assert not report.agree
    (m,) = report.mismatches
    assert m.model == "rtl" and m.byte == first["byte"] and m.differing_bytes == 1
    assert m.buffer == "out" and m.insn_index is not None and m.element is not None
    insns = image.instructions()
    store = insns[m.insn_index]
    assert type(store).__name__ == "Store"
    eb = PYNQ.elem_bytes(4)                                  # MemId.OUT
    assert store.dram_base * eb <= m.byte < (store.dram_base + store.y_size * store.x_stride + store.x_size) * eb
    assert m.lane == (m.byte % eb) // (PYNQ.out_bits // 8)
    assert m.got == np.int8(np.uint8(first["dram"][m.byte] ^ 0x5A)) and m.expected == np.int8(first["dram"][m.byte])


def test_cosim_reports_a_failing_model(monkeypatch, tmp_path, capsys):
    image = random_program(PYNQ, 1)
    path = tmp_path / "p.npz"
    image.save(path)
    real_run = cosim_module.run_image

    def failing(img, model, timeout_s=None):
        if model == "rtl":
            from vtakit.errors import DeviceTimeout
            raise DeviceTimeout("RTL made no progress")
        return real_run(img, model=model, timeout_s=timeout_s)

    monkeypatch.setattr(cosim_module, "run_image", failing)
    assert main(["hw", "cosim", str(path)]) == 1
    assert "RTL made no progress" in capsys.readouterr().out


def test_hw_gen_writes_the_package_from_the_config(tmp_path, capsys):
    assert main(["hw", "gen", "--config", "1x8", "-o", str(tmp_path)]) == 0
    pkg = (tmp_path / "vta_pkg.sv").read_text()
    cfg = HwConfig.preset("1x8")
    assert pkg == package_text(cfg)
    assert f"localparam int BLOCK_IN = {cfg.block_in};" in pkg
    field = next(f for f in gemm_layout(cfg).fields if f.name == "wgt_factor_in")
    assert f"localparam int GEMM_WGT_FACTOR_IN_LO = {field.offset};" in pkg
    assert {p.name for p in tmp_path.iterdir()} == {"vta_pkg.sv", *SOURCES}


def test_hw_build_cli(capsys):
    assert main(["hw", "build", "--config", "pynq"]) == 0
    assert "lint -Wall clean" in capsys.readouterr().out


def test_synth_counting_rules():
    cells = {"LUT6": 10, "LUT2": 5, "RAM64M": 2, "SRLC32E": 3, "FDRE": 7, "FDSE": 1, "RAMB36E1": 3,
             "RAMB18E1": 3, "DSP48E1": 4, "CARRY4": 9, "MUXF7": 2}
    assert count_resources(cells) == {"lut": 10 + 5 + 8 + 3, "ff": 8, "bram36": 4.5, "dsp": 4}
    assert part_for(PYNQ, None).name == "xc7z020"
    assert part_for(HwConfig.preset("ultra96"), None).family == "xcup"
    with pytest.raises(Exception, match="Xilinx"):
        part_for(HwConfig.preset("de10nano"), None)
    assert main(["hw", "synth", "--config", "pynq", "--part", "xc9999"]) == 1


@pytest.mark.slow
def test_pynq_synthesizes_and_fits(capsys):
    """Yosys synth_xilinx of the default configuration (minutes; cached by sources)."""
    assert main(["hw", "synth", "--config", "pynq", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["fits"] and result["part"] == "xc7z020"
    assert 0 < result["lut"] <= 53_200 and result["dsp"] <= 220 and result["bram36"] <= 140


def test_conv2d_on_rtl_matches_numpy():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 32, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 32, 3, 3), dtype=np.int8)
    y, rep = ops.conv2d(x, w, padding=1, shift=7, clip=(-128, 127), device="rtl")
    assert np.array_equal(y, reference.conv2d(x, w, 1, 1, None, shift=7, clip=(-128, 127)))
    assert rep.stats.model == "rtl" and rep.cycles > 0


@pytest.mark.slow
@pytest.mark.parametrize("layer", [layer for layer in RESNET18 if layer.name != "C1"], ids=lambda layer: layer.name)
def test_resnet_layer_on_rtl(layer):
    """C2-C11 on the RTL: numpy's result, and the cycle model within 5 % of the RTL's cycles."""
    from vtakit.compiler.backends.vta.layer_runs import run_layer

    row = run_layer(layer, PYNQ, "rtl", None)
    assert row["correct"]
    assert abs(row["model_error_pct"]) <= 5.0, row
