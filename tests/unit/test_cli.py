"""The vtakit command line: every subcommand once, and errors as one line."""

import json
import subprocess
import sys

import pytest

from vtakit.cli import main
from vtakit.isa import HwConfig
from vtakit.isa.image import ProgramImage


def test_config(capsys):
    assert main(["config", "--list"]) == 0
    assert "ultra96" in capsys.readouterr().out
    assert main(["config", "1x8", "--json"]) == 0
    assert HwConfig.from_dict(json.loads(capsys.readouterr().out)) == HwConfig.preset("1x8")
    assert main(["config", "pynq"]) == 0
    out = capsys.readouterr().out
    assert "acc_depth" in out and "RTL: builds (64-bit memory bus)" in out


def test_config_states_which_buses_the_rtl_builds(tmp_path, capsys):
    wide = tmp_path / "wide.json"
    wide.write_text(HwConfig.preset("pynq").replace(bus_bytes=32, mem_burst_beats=128).to_json())
    assert main(["config", str(wide)]) == 0
    assert "RTL: not built: the RTL implements 64- and 128-bit memory buses, not 256-bit" in capsys.readouterr().out
    assert main(["config", "--list"]) == 0
    assert "builds 64-bit and 128-bit memory buses" in capsys.readouterr().out


def test_asm_disasm_round_trip(tmp_path, capsys):
    source = tmp_path / "p.s"
    source.write_text("LOAD.INP sram=0 dram=0 y=1 x=4 stride=4 push=next\n"
                      "GEMM uop=0:4 iter=2x2 dst=4,1 pop=prev\nFINISH\n")
    assert main(["asm", str(source)]) == 0
    binary = tmp_path / "p.bin"
    assert binary.stat().st_size == 48
    capsys.readouterr()
    assert main(["disasm", str(binary)]) == 0
    listing = capsys.readouterr().out
    assert "GEMM" in listing and "iter=2x2" in listing
    (tmp_path / "q.s").write_text(listing)
    assert main(["asm", str(tmp_path / "q.s"), "-o", str(tmp_path / "q.bin")]) == 0
    assert (tmp_path / "q.bin").read_bytes() == binary.read_bytes()


def test_demo(tmp_path, capsys):
    trace = tmp_path / "demo.json"
    assert main(["demo", "--layer", "C11", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "result matches numpy: yes" in out and str(trace) in out
    assert json.loads(trace.read_text())["traceEvents"]
    assert main(["demo", "--layer", "C99"]) == 1


def test_compile_op_then_sim_the_image(tmp_path, capsys):
    image, listing = tmp_path / "op.npz", tmp_path / "op.s"
    assert main(["compile-op", "conv2d", "--input", "1,20,9,9", "--kernel", "24,3,3", "--pad", "1",
                 "--bias", "--shift", "6", "--clip", "0,127", "-o", str(image), "--asm", str(listing)]) == 0
    assert "uop[" in listing.read_text() and "GEMM" in listing.read_text()
    capsys.readouterr()
    assert main(["sim", str(image), "--json", "-o", str(tmp_path / "dram.npz")]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["model"] == "cycle" and stats["cycles"] > 0 and stats["gemm_uops"] > 0
    assert main(["sim", str(image), "--model", "functional"]) == 0
    assert "functional model" in capsys.readouterr().out
    assert main(["disasm", str(image), "--uops"]) == 0
    assert "uop[" in capsys.readouterr().out
    img = ProgramImage.load(image)
    assert set(img.regions) == {"data", "weight", "bias", "out"}
    assert main(["compile-op", "conv2d", "--input", "1,2,3", "--kernel", "4,3,3"]) == 1


def test_bench(capsys):
    assert main(["bench", "conv2d", "--layers", "C11,C10", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["C11", "C10"] and all(r["correct"] for r in rows)
    assert set(rows[0]) == {"name", "macs", "cycles", "utilization", "compute_bound", "gops", "correct"}
    assert rows[0]["utilization"] <= rows[0]["compute_bound"] <= 1
    assert main(["bench", "dense", "--device", "fsim"]) == 0
    assert "all results match numpy: yes" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["sim", "missing.npz"], "does not exist"),
    (["config", "nope"], "unknown preset"),
    (["disasm", "missing.bin"], "does not exist"),
    (["bench", "conv2d", "--layers", "C99"], "no layer 'C99'"),
    (["bench", "conv2d", "--workload", "vgg"], "unknown workload"),
])
def test_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "vtakit", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout


def test_sim_takes_device_and_the_old_model_spelling_warns(tmp_path, capsys):
    image = tmp_path / "op.npz"
    assert main(["compile-op", "conv2d", "--input", "1,16,4,4", "--kernel", "16,1,1", "-o", str(image)]) == 0
    capsys.readouterr()
    assert main(["sim", str(image), "--device", "functional"]) == 0
    assert "functional model" in capsys.readouterr().out
    assert main(["sim", str(image), "--model", "functional"]) == 0
    captured = capsys.readouterr()
    assert "functional model" in captured.out and "--model is deprecated; use --device" in captured.err


@pytest.mark.parametrize("argv", [["bench", "conv2d", "--seeds", "5"], ["bench", "dense", "--trials", "3"],
                                  ["bench", "tuner", "--vthreads", "2"]])
def test_bench_options_belong_to_their_benchmark(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_cli_modules_do_not_import_each_other_in_a_cycle():
    """Every command module imports only `_common` (and `tuning`, for `bench tuner`) from the CLI package."""
    import ast
    from pathlib import Path

    import vtakit.cli as cli

    folder = Path(cli.__file__).parent
    edges = {}
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
        edges[path.stem] = ({node.module.rsplit(".", 1)[-1] for node in imports if node.module.startswith("vtakit.cli.")}
                            | {a.name for node in imports if node.module == "vtakit.cli" for a in node.names})
    assert set(cli.COMMAND_MODULES) <= set(edges)
    for name, targets in edges.items():
        assert name not in targets
        for target in targets:
            assert name not in edges.get(target, set()), f"vtakit.cli.{name} <-> vtakit.cli.{target}"
    assert all(targets <= {"_common", "tuning"} for name, targets in edges.items() if name != "__init__"), edges
    assert edges["__init__"] == set(cli.COMMAND_MODULES)  # the package registers every command, nothing else
