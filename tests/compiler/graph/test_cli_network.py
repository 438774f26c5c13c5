"""`vtakit compile`, `run` and `report` on a zoo model, and their one-line errors."""

import numpy as np
import onnx

from vtakit.cli import main
from vtakit.compiler import zoo


def test_compile_run_report(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    onnx.save(zoo.build("small_cnn"), model)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "cal.npy", rng.standard_normal((3, 1, 3, 32, 32)).astype(np.float32))
    np.save(tmp_path / "x.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    mod = tmp_path / "small.vtamod"
    assert main(["compile", str(model), "--config", "pynq", "--calibrate", str(tmp_path / "cal.npy"),
                 "-o", str(mod)]) == 0
    assert "accelerator tasks" in capsys.readouterr().out
    outs = {}
    for device in ("fsim", "sim", "cpu"):
        out = tmp_path / f"y_{device}.npy"
        assert main(["run", str(mod), "--input", str(tmp_path / "x.npy"), "--device", device,
                     "--output", str(out)]) == 0
        outs[device] = np.load(out)
    assert np.array_equal(outs["fsim"], outs["sim"]) and np.array_equal(outs["sim"], outs["cpu"])
    png = tmp_path / "roof.png"
    assert main(["report", str(mod), "--roofline", str(png)]) == 0
    text = capsys.readouterr().out
    assert "accelerator:" in text and "QConv" in text and png.exists()
    cpu_mod = tmp_path / "small_cpu.vtamod"
    assert main(["compile", str(model), "--target", "cpu", "-o", str(cpu_mod)]) == 0
    assert main(["run", str(cpu_mod), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "f.npy")]) == 0
    assert np.abs(np.load(tmp_path / "f.npy") - outs["sim"]).max() < 0.1


def test_cli_errors_are_one_line(tmp_path, capsys):
    model = tmp_path / "digits.onnx"
    onnx.save(zoo.build("digits_cnn"), model)
    mod = tmp_path / "d.vtamod"
    assert main(["compile", str(model), "-o", str(mod)]) == 0
    assert "seeded random inputs" in capsys.readouterr().out
    np.save(tmp_path / "wrong.npy", np.zeros((2, 1, 8, 8), np.float32))
    cases = [["compile", str(tmp_path / "missing.onnx")],
             ["run", str(mod), "--input", str(tmp_path / "wrong.npy")],
             ["run", str(mod), "--input", str(tmp_path / "nothing.npy")],
             ["compile", str(model), "--input-shape", "data=oops"],
             ["compile", str(model), "--calibrate", str(tmp_path / "wrong.npy")]]
    for argv in cases:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, (argv, err)


def test_input_files_are_checked_before_they_are_read(tmp_path, capsys, monkeypatch):
    """A FIFO is refused (np.load would wait on it forever); an .npz's declared sizes are capped."""
    import os

    from vtakit.cli import network

    model = tmp_path / "small.onnx"
    onnx.save(zoo.build("small_cnn"), model)
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    assert main(["compile", str(model), "--calibrate", str(fifo), "-o", str(tmp_path / "m.vtamod")]) == 1
    assert capsys.readouterr().err.strip() == f"error: calibration file {fifo} is not a regular file"
    np.savez(tmp_path / "cal.npz", x=np.zeros((3, 1, 3, 32, 32), np.float32))
    monkeypatch.setattr(network, "MAX_ARRAY_FILE_BYTES", 1024)
    assert main(["compile", str(model), "--calibrate", str(tmp_path / "cal.npz"), "-o", str(tmp_path / "m.vtamod")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expands to" in err[0] and "more than the 0 MiB" in err[0]
