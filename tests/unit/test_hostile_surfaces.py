"""What a second red team found on the newest surfaces (signing, options, output paths): each bad value
is one error of vtakit's own, never a silent acceptance, a wrong message or an internal error."""

from __future__ import annotations

import onnx
import pytest

import vtakit
from vtakit.cli import main
from vtakit.compiler import zoo
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.errors import CompileError, ConfigError, VtaError
from tests.support.saved_modules import saved_digits_module


@pytest.fixture(scope="module")
def module_path(tmp_path_factory):
    return saved_digits_module(tmp_path_factory.mktemp("module"), seed=5)[0]


@pytest.mark.parametrize("trust", ["no", "false", "0", [0], 1.0])
def test_trust_must_be_a_bool_not_a_truthy_string(module_path, trust):
    with pytest.raises(CompileError, match="trust must be True or False"):
        CompiledModule.load(module_path, trust=trust)


@pytest.mark.parametrize("max_bytes", [-1, 0, "10", 1.5, True])
def test_max_bytes_must_be_a_positive_integer(module_path, max_bytes):
    with pytest.raises(CompileError, match="max_bytes must be a positive integer"):
        CompiledModule.load(module_path, max_bytes=max_bytes)


def test_a_module_is_never_written_into_a_device_or_a_folder(module_path, tmp_path):
    module = CompiledModule.load(module_path)
    for target in ("/dev/full", str(tmp_path)):
        with pytest.raises(CompileError, match="not a regular file"):
            module.save(target)


@pytest.mark.parametrize("plot", ["/dev/full", "roofline", "plot.txt"])
def test_plot_paths_must_be_png_files(tmp_path, plot, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", str(tmp_path / "m.vtamod"), "--input", "x.npy", "--plot", plot])
    assert e.value.code == 2 and "must end in .png" in capsys.readouterr().err


def test_a_folder_named_like_a_png_is_refused(tmp_path, capsys):
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(SystemExit):
        main(["run", str(tmp_path / "m.vtamod"), "--input", "x.npy", "--plot", str(tmp_path / "dir.png")])
    assert "is not a regular file" in capsys.readouterr().err


def test_an_output_path_the_file_system_refuses_is_one_line_not_an_internal_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["hw", "gen", "-o", str(blocker)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "internal error" not in err and len(err.splitlines()) == 1


def test_fpga_check_refuses_a_negative_program_count(capsys):
    assert main(["fpga", "check", "--sim", "--programs", "-1"]) == 1
    assert "--programs must be 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize("keywords, error", [
    (dict(keep_float=5), CompileError), (dict(tuning_log=5), VtaError), (dict(config=123), ConfigError)])
def test_compile_arguments_of_the_wrong_type_are_vtakit_errors(keywords, error):
    with pytest.raises(error):
        vtakit.compile(zoo.build("digits_cnn"), **keywords)


@pytest.mark.parametrize("model", [0, 42, 3.5])
def test_a_number_is_not_read_as_a_file_descriptor(model):
    with pytest.raises(CompileError, match="a model is an ONNX file path, bytes or an onnx.ModelProto"):
        vtakit.compile(model)


def test_a_model_proto_still_compiles():
    assert isinstance(zoo.build("digits_cnn"), onnx.ModelProto)


def test_keep_float_of_only_commas_names_no_node(tmp_path, capsys):
    model = tmp_path / "d.onnx"
    onnx.save(zoo.build("digits_cnn"), model)
    assert main(["compile", str(model), "--keep-float", ",,,", "-o", str(tmp_path / "d.vtamod")]) == 1
    err = capsys.readouterr().err
    assert err == "error: --keep-float ',,,' names no node\n"   # one line, no blank line before it


@pytest.mark.parametrize("flags", [["--calibration", "mse"], ["--calibrate", "cal.npy"], ["--config", "ultra96"]])
def test_report_refuses_compile_options_without_accuracy(module_path, flags, capsys):
    """A compiled module's report cannot change how it was compiled: such options are refused, not ignored."""
    assert main(["report", str(module_path), *flags]) == 1
    assert "only apply with --accuracy" in capsys.readouterr().err
