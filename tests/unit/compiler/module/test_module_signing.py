"""Modules are signed with this user's key (compiler/module/signing.py): a module edited by someone
who recomputed every hash, or compiled with another key, is refused in one line unless trusted;
`--trust` skips only the signature.  The key file is made once, atomically, and refused when loose."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from vtakit.cli import main
from vtakit.compiler.module import signing
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.module.container import manifest_digest, read_module
from vtakit.errors import CompileError

from tests.support.saved_modules import attacker_save, saved_digits_module, signing_key

NOT_OURS = "not signed by this machine's key"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return saved_digits_module(tmp_path_factory.mktemp("signed"), seed=1)


def _contents(saved) -> tuple[dict, dict]:
    """The saved module's manifest (without its hashes and signature) and arrays, to edit."""
    manifest, arrays = read_module(saved[0])
    manifest = copy.deepcopy(manifest)
    for k in ("format", "version", "arrays", "sha256", "signature"):
        manifest.pop(k)
    return manifest, {k: v.copy() for k, v in arrays.items()}


def _weights_edited(saved, tmp_path) -> str:
    """An attacker's module: the output scales doubled (a valid module, other outputs), hashes recomputed."""
    manifest, arrays = _contents(saved)
    arrays["graph/logits.channel_scale"] = arrays["graph/logits.channel_scale"] * 2
    return str(attacker_save(tmp_path / "evil.vtamod", manifest, arrays, tmp_path / "attacker.key"))


def refused(path, why: str) -> str:
    with pytest.raises(CompileError, match=why) as e:
        CompiledModule.load(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and NOT_OURS in msg and "--trust" in msg
    return msg


def test_an_attackers_edit_with_recomputed_hashes_is_refused_and_trust_runs_it(saved, tmp_path):
    """Every field of this edit is valid, so no check can tell: only the signature does."""
    path, x, want = saved
    evil = _weights_edited(saved, tmp_path)
    refused(evil, "signed with key [0-9a-f]{16}, this machine's is")
    got = CompiledModule.load(evil, trust=True).run(x, device="fsim")["logits"]
    assert np.array_equal(got, want * 2)  # it did run: what the user accepted with trust
    assert np.array_equal(CompiledModule.load(path).run(x, device="fsim")["logits"], want)


def test_trust_still_checks_every_hash_and_field(saved, tmp_path):
    manifest, arrays = read_module(saved[0])
    arrays["graph/fc.bias_q"] = arrays["graph/fc.bias_q"] + 1  # no hash recomputed
    members = {k.replace("/", "|"): v for k, v in arrays.items()}
    members["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    with open(tmp_path / "h.vtamod", "wb") as f:
        np.savez(f, **members)
    with pytest.raises(CompileError, match="does not match its sha256"):
        CompiledModule.load(tmp_path / "h.vtamod", trust=True)
    manifest, arrays = _contents(saved)
    manifest["config"]["batch"] = 0
    bad = attacker_save(tmp_path / "f.vtamod", manifest, arrays, tmp_path / "attacker.key")
    with pytest.raises(CompileError, match="stored config"):
        CompiledModule.load(bad, trust=True)


def test_a_module_without_a_signature_is_refused(saved, tmp_path):
    manifest, arrays = read_module(saved[0])
    del manifest["signature"]
    manifest["sha256"] = manifest_digest(manifest)
    members = {k.replace("/", "|"): v for k, v in arrays.items()}
    members["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    with open(tmp_path / "u.vtamod", "wb") as f:
        np.savez(f, **members)
    refused(tmp_path / "u.vtamod", "carries no signature")
    assert CompiledModule.load(tmp_path / "u.vtamod", trust=True).outputs


def test_our_signature_moved_onto_edited_contents_does_not_verify(saved, tmp_path):
    """The attacker copies a genuine signature (our key's id included) onto an edited manifest."""
    manifest, arrays = read_module(saved[0])
    manifest["graph"]["nodes"][2]["attrs"]["shift"][0] += 1
    manifest["sha256"] = manifest_digest(manifest)
    members = {k.replace("/", "|"): v for k, v in arrays.items()}
    members["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    with open(tmp_path / "s.vtamod", "wb") as f:
        np.savez(f, **members)
    refused(tmp_path / "s.vtamod", "does not match its contents")


def test_a_module_compiled_with_another_key_needs_that_key_or_trust(saved, tmp_path):
    """The PC -> board flow: a module from another machine runs there once its key file is copied."""
    manifest, arrays = _contents(saved)
    pc_key = tmp_path / "pc" / "module.key"
    pc_module = attacker_save(tmp_path / "pc.vtamod", manifest, arrays, pc_key)
    refused(pc_module, "signed with key")
    with signing_key(pc_key):
        CompiledModule.load(pc_module)
    reviewed = CompiledModule.load(pc_module, trust=True).save(tmp_path / "here.vtamod")  # signed here now
    assert np.array_equal(CompiledModule.load(reviewed).run(saved[1], device="fsim")["logits"], saved[2])
    with signing_key(tmp_path / "board" / "module.key"):  # a machine with no key yet: none is made by loading
        refused(pc_module, "there is no key at")
        assert not (tmp_path / "board").exists()


def test_cli_run_and_report_take_trust(saved, tmp_path, capsys, monkeypatch):
    evil = _weights_edited(saved, tmp_path)
    np.save(tmp_path / "x.npy", saved[1])
    monkeypatch.chdir(tmp_path)  # whatever `report` writes by default lands here
    for cmd in (["run", evil, "--input", str(tmp_path / "x.npy"), "--device", "fsim"],
                ["report", evil, "--device", "fsim"]):
        assert main(cmd) == 1
        out, err = capsys.readouterr()
        assert err.startswith("error: ") and err.count("\n") == 1 and NOT_OURS in err and "--trust" in err
        assert main([*cmd, "--trust"]) == 0
        capsys.readouterr()


# ------------------------------------------------------------- the key file
def test_a_new_key_file_is_private_and_hex(tmp_path):
    path = tmp_path / "deeper" / "module.key"
    key = signing.ensure_key(path)
    assert len(key) == signing.KEY_BYTES and signing.ensure_key(path) == key
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text() == key.hex() + "\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["module.key"]  # no temporary file left


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_key_file_others_can_read_is_refused(saved, tmp_path, mode):
    key = tmp_path / "module.key"
    key.write_text(os.urandom(32).hex() + "\n")
    key.chmod(mode)
    with signing_key(key):
        with pytest.raises(CompileError, match=f"accessible to other users \\(mode {mode:04o}\\).*chmod 600"):
            CompiledModule.load(saved[0]).save(tmp_path / "m.vtamod")
        with pytest.raises(CompileError, match="accessible to other users"):
            CompiledModule.load(saved[0])
    assert key.stat().st_mode & 0o777 == mode  # reported, never changed behind the user's back


@pytest.mark.parametrize("content", ["", "abc\n", "g" * 64, "AB" * 32, "ab" * 33, "ab" * 31 + "\nab\n"],
                         ids=["empty", "short", "not hex", "upper case", "long", "two lines"])
def test_a_malformed_key_file_is_refused(tmp_path, content):
    key = tmp_path / "module.key"
    key.write_text(content)
    key.chmod(0o600)
    with pytest.raises(CompileError, match="is malformed .*64 lowercase hex digits"):
        signing.ensure_key(key)
    assert key.read_text() == content


def test_a_key_path_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo, 0o600)
    folder = tmp_path / "folder.key"
    folder.mkdir(mode=0o700)
    for path in (fifo, folder):  # the FIFO must not block
        with pytest.raises(CompileError, match="is not a regular file"):
            signing.ensure_key(path)


def test_concurrent_first_use_makes_one_key(tmp_path):
    """Eight processes make the key at the same moment: all end with the same one, no file half-written."""
    path, go = tmp_path / "k" / "module.key", tmp_path / "go"
    code = "\n".join(["import sys, time, pathlib",
                      "from vtakit.compiler.module.signing import ensure_key",
                      "ready, go, key = map(pathlib.Path, sys.argv[1:])",
                      "ready.touch()",
                      "while not go.exists():",
                      "    time.sleep(0.001)",
                      "print(ensure_key(key).hex())"])
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"ready{i}"), str(go), str(path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready*"))) < len(procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    keys = set()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        keys.add(out.strip())
    assert keys == {path.read_text().strip()}
    assert sorted(p.name for p in path.parent.iterdir()) == ["module.key"]
