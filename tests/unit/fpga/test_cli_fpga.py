"""The FPGA commands end to end: `vtakit fpga boards|project|sim-overlay|check`
(on the simulated board; on this machine the real one is a one-line error), and
`vtakit run --device pynq-sim|pynq` on a compiled network."""

import json

import numpy as np
import onnx
import pytest

from vtakit.cli import main
from vtakit.compiler import zoo


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_fpga_boards_and_project(tmp_path, capsys):
    assert main(["fpga", "boards"]) == 0
    assert "ultra96-v2" in capsys.readouterr().out
    out = tmp_path / "zcu104"
    assert main(["fpga", "project", "--board", "zcu104", "-o", str(out), "--check"]) == 0
    text = capsys.readouterr().out
    assert "checks passed" in text and "not run by vtakit" in text
    assert (out / "build.tcl").is_file() and (out / "overlay" / "vtakit_zcu104_zcu104.json").is_file()
    assert main(["fpga", "project", "--board", "pynq-z1", "--config", "ultra96", "-o", str(tmp_path / "x")]) == 1
    assert "at most 64 bits" in _error_line(capsys)


def test_fpga_check_on_the_simulated_board(tmp_path, capsys):
    assert main(["fpga", "check", "--sim", "--programs", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and [r["name"] for r in report["rows"]] == ["registers", "random programs", "conv layer"]
    assert main(["fpga", "sim-overlay", "--board", "pynq-z2", "--flavour", "vta-hls", "-o", str(tmp_path)]) == 0
    bit = tmp_path / "1x16_i8w8a32_15_15_18_17.bit"
    assert bit.is_file() and bit.with_suffix(".hwh").is_file()
    capsys.readouterr()
    assert main(["fpga", "check", "--sim", "--board", "pynq-z2", "--overlay", str(bit), "--programs", "2"]) == 0
    assert "board check passed" in capsys.readouterr().out


def test_fpga_check_without_a_board(capsys):
    assert main(["fpga", "check"]) == 1
    assert "no PYNQ board here" in _error_line(capsys)


def test_the_old_board_check_spelling_names_the_new_one(capsys):
    assert main(["board", "check", "--sim"]) == 2
    assert capsys.readouterr().err == "error: `vtakit board check` is now `vtakit fpga check` (same options)\n"


@pytest.fixture(scope="module")
def small_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("net")
    model = folder / "small.onnx"
    onnx.save(zoo.build("small_cnn"), model)
    rng = np.random.default_rng(0)
    np.save(folder / "cal.npy", rng.standard_normal((2, 1, 3, 32, 32)).astype(np.float32))
    np.save(folder / "x.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    module = folder / "small.vtamod"
    assert main(["compile", str(model), "--config", "pynq", "--calibrate", str(folder / "cal.npy"),
                 "-o", str(module)]) == 0
    return folder, module


def test_run_network_on_the_simulated_board(small_module, capsys):
    folder, module = small_module
    outs = {}
    for device in ("fsim", "pynq-sim"):
        out = folder / f"y_{device}.npy"
        assert main(["run", str(module), "--input", str(folder / "x.npy"), "--device", device,
                     "--output", str(out)]) == 0
        outs[device] = np.load(out)
    assert np.array_equal(outs["fsim"], outs["pynq-sim"])
    assert "on pynq-sim" in capsys.readouterr().out
    assert main(["run", str(module), "--input", str(folder / "x.npy"), "--device", "pynq"]) == 1
    assert "no PYNQ board here" in _error_line(capsys)
