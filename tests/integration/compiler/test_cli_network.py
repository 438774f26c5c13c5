"""`vtakit compile`, `run` and `report` on a zoo model, and their one-line errors."""

import json

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
    assert main(["report", str(mod), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "accelerator:" in text and "QConv" in text and png.exists()
    cpu_mod = tmp_path / "small_cpu.vtamod"
    assert main(["compile", str(model), "--target", "cpu", "-o", str(cpu_mod)]) == 0
    assert main(["run", str(cpu_mod), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "f.npy")]) == 0
    assert np.abs(np.load(tmp_path / "f.npy") - outs["sim"]).max() < 0.1


def test_report_json_table_as_text_and_no_file_unasked(tmp_path, monkeypatch, capsys):
    """`report --json` prints JSON alone on stdout; the report's table prints as text from Python;
    run and report write no file the user did not name (the roofline only with --plot)."""
    from vtakit.compiler.module.compiled import CompiledModule

    model, mod, x = tmp_path / "digits.onnx", tmp_path / "d.vtamod", tmp_path / "x.npy"
    onnx.save(zoo.build("digits_cnn"), model)
    assert main(["compile", str(model), "-o", str(mod)]) == 0
    module = CompiledModule.load(mod)
    (name, info), = module.inputs.items()
    np.save(x, np.random.default_rng(0).standard_normal(info.shape).astype(np.float32))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    assert main(["run", str(mod), "--input", str(x), "--report"]) == 0
    assert "accelerator:" in capsys.readouterr().out
    assert main(["report", str(mod), "--json"]) == 0
    captured = capsys.readouterr()
    rep = json.loads(captured.out)
    assert rep["accelerator_cycles"] > 0 and {r["place"] for r in rep["layers"]} == {"vta", "host"}
    assert "seeded random inputs" in captured.err
    assert main(["report", str(mod), "--accuracy", "--json"]) == 1
    assert "--accuracy" in capsys.readouterr().err
    assert list(cwd.iterdir()) == []
    png = tmp_path / "roof.png"
    assert main(["report", str(mod), "--input", str(x), "--json", "--plot", str(png)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["accelerator_cycles"] == rep["accelerator_cycles"]
    assert png.is_file() and f"roofline written to {png}" in captured.err
    png.unlink()
    assert main(["run", str(mod), "--input", str(x), "--roofline", str(png)]) == 0
    assert png.is_file() and "--roofline is deprecated; use --plot" in capsys.readouterr().err

    module.run(np.load(x), device="sim")
    table = module.report().table()
    text = str(table)
    assert "per layer on sim" in text and "QConv" in text and "rich" not in text and "\x1b" not in text
    print(table)
    assert capsys.readouterr().out == text + "\n"


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
