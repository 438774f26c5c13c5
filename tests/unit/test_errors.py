"""Every error a user sees is one bounded line: VtaError's message, and the CLI's last resort."""

from __future__ import annotations

import pytest

from vtakit import cli
from vtakit.errors import MAX_MESSAGE_CHARS, CompileError, SimError, one_line


def test_a_huge_bad_value_is_elided_not_echoed():
    message = str(CompileError("cannot parse " + "7" * 5_000_000 + " as a shape", node="reshape_3", op="Reshape"))
    assert len(message) <= MAX_MESSAGE_CHARS and "\n" not in message
    assert message.startswith("node 'reshape_3' (Reshape): cannot parse") and message.endswith("as a shape")


def test_line_breaks_become_one_line():
    assert str(SimError("bad\n  opcode\r\n7", insn_index=3)) == "instruction 3: bad opcode 7"
    assert one_line("short") == "short"


def test_a_bug_in_a_command_is_one_line_with_exit_status_2(monkeypatch, capsys):
    from vtakit.cli import tools

    def broken(args):
        raise KeyError("x" * 10_000)

    monkeypatch.setattr(tools, "cmd_config", broken)
    monkeypatch.delenv("VTAKIT_DEBUG", raising=False)
    assert cli.main(["config"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: internal error in vtakit config (KeyError")
    assert len(err) < 400
    monkeypatch.setenv("VTAKIT_DEBUG", "1")
    with pytest.raises(KeyError):
        cli.main(["config"])


def test_warnings_reach_the_cli_user_as_one_line(monkeypatch, capsys):
    import warnings

    from vtakit.cli import tools

    def warns(args):
        warnings.warn("clock below the\nboard's minimum", stacklevel=1)
        return 0

    monkeypatch.setattr(tools, "cmd_config", warns)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["config"]) == 0
    assert capsys.readouterr().err == "warning: clock below the board's minimum\n"
