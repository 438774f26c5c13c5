"""The shape of the command line: noun, then verb, with only that verb's options; commands that moved
say where to; no file written unless asked; and the library below it imports none of it."""

import ast
import os
from pathlib import Path

import pytest

from vtakit.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, message", [
    (["cosim", "conv.npz", "--json"], "error: `vtakit cosim` is now `vtakit hw cosim` (same options)\n"),
    (["board", "check", "--sim"], "error: `vtakit board check` is now `vtakit fpga check` (same options)\n"),
])
def test_a_moved_command_names_its_new_spelling_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == message and captured.out == ""


@pytest.mark.parametrize("argv", [
    ["hw", "gen", "--part", "xc7z020", "-o", "rtl"],    # synth's option
    ["hw", "build", "--json"],                          # synth's and pnr's
    ["hw", "pnr", "--no-timing"],                       # synth's
    ["hw", "synth", "--trace", "vcd"],                  # build's
    ["hw", "cosim", "x.npz", "--part", "xc7z020"],
    ["fpga", "check", "-o", "out"],                     # project's and sim-overlay's
])
def test_hw_and_fpga_options_belong_to_their_subcommand(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["hw", "gen", "--config", "1x8"], ["explore", "--space", "s.toml"]])
def test_commands_that_write_folders_need_one_named(argv, capsys):
    """No default output folder (`rtl_out`, `out/explore`): nothing lands where the user did not say."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "-o/--output" in capsys.readouterr().err


def test_the_layer_demo_writes_no_trace_unasked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--layer", "C11"]) == 0
    out = capsys.readouterr().out
    assert "result matches numpy: yes" in out and "trace written" not in out
    assert list(tmp_path.iterdir()) == []


def _vtakit_files():
    """Every Python file of the library, through the links vtakit/isa -> ../isa etc."""
    for parent, dirs, files in os.walk(ROOT / "vtakit", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        yield from (Path(parent) / f for f in files if f.endswith(".py"))


def test_the_library_imports_nothing_from_the_cli():
    """Only the CLI and `python -m vtakit` import vtakit.cli (function-level imports included)."""
    cli = ROOT / "vtakit" / "cli"
    offenders = []
    for path in _vtakit_files():
        if cli in path.parents or path == ROOT / "vtakit" / "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "vtakit":
                names += [f"vtakit.{a.name}" for a in node.names]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "vtakit.cli" or
                          n.startswith("vtakit.cli.")]
    assert not offenders, offenders


def test_tuning_context_is_the_library_s(tmp_path):
    """What vtakit.compile(tuning_log=...) and --tuning-log enter: nothing without a log, the table with one."""
    from vtakit.scheduling.log import tuning_context

    with tuning_context(None) as table:
        assert table is None
    log = tmp_path / "tune.jsonl"
    log.write_text("")
    with tuning_context(str(log)) as table:
        assert table is not None and len(table) == 0
