"""Tampered and broken `.vtamod` modules are one CompileError line, refused before anything runs;
run inputs with NaN/Inf warn (or fail with strict); `vtakit run` on a tampered module is one error line.

Tampering is done the way an attacker would: fields edited and the module re-saved with consistent
hashes, signed with the attacker's own key (`attacker_save`).  Such a module is refused for its
signature (test_module_signing.py); the field tests here load it with trust=True, as `--trust` does,
so each checks the validation itself, not only the sha256 and the signature."""

from __future__ import annotations

import copy
import io
import json
import zipfile

import numpy as np
import pytest

from vtakit.cli import main
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.passes.lower import ActBuffer
from vtakit.compiler.module.container import read_module
from vtakit.compiler.module.runner import NonFiniteInputWarning
from vtakit.errors import CompileError
from vtakit.isa.config import HwConfig
from vtakit.isa.fields import mem_layout
from vtakit.isa.opcodes import Opcode

from tests.support.saved_modules import attacker_save, saved_digits_module


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small compiled network saved to disk, an input and the outputs it gives."""
    return saved_digits_module(tmp_path_factory.mktemp("mod"), seed=0)


def tampered(saved, tmp_path, edit) -> str:
    """The saved module with `edit(manifest, arrays)` applied, re-saved with consistent hashes and
    signed with an attacker's key."""
    manifest, arrays = read_module(saved[0])
    manifest = copy.deepcopy(manifest)
    arrays = {k: v.copy() for k, v in arrays.items()}
    for k in ("format", "version", "arrays", "sha256", "signature"):
        manifest.pop(k)
    edit(manifest, arrays)
    return str(attacker_save(tmp_path / "t.vtamod", manifest, arrays, tmp_path / "attacker.key"))


def raw_save(path, manifest, arrays) -> None:
    """A module file written as given, hashes left as they were."""
    members = {k.replace("/", "|"): v for k, v in arrays.items()}
    members["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **members)


def refused(path, match: str, trust: bool = False) -> None:
    with pytest.raises(CompileError, match=match) as e:
        CompiledModule.load(path, trust=trust)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def vta_task(manifest, i=0) -> dict:
    return [t for t in manifest["tasks"] if "node" in t][i]


def test_untouched_module_loads_and_gives_the_same_outputs(saved, tmp_path):
    path, x, want = saved
    same = tampered(saved, tmp_path, lambda m, a: None)  # signed elsewhere: runs only when trusted
    for module in (CompiledModule.load(path), CompiledModule.load(same, trust=True)):
        assert np.array_equal(module.run(x, device="fsim")["logits"], want)


# ------------------------------------------------------------- version and hashes
def test_an_edited_array_fails_its_hash(saved, tmp_path):
    manifest, arrays = read_module(saved[0])
    arrays["graph/fc.bias_q"] = arrays["graph/fc.bias_q"] + 1
    raw_save(tmp_path / "h.vtamod", manifest, arrays)
    refused(tmp_path / "h.vtamod", "array 'graph/fc.bias_q' does not match its sha256")


def test_an_edited_manifest_fails_its_hash(saved, tmp_path):
    manifest, arrays = read_module(saved[0])
    manifest["graph"]["nodes"][2]["attrs"]["shift"][0] += 1
    raw_save(tmp_path / "m.vtamod", manifest, arrays)
    refused(tmp_path / "m.vtamod", "manifest does not match its sha256")


@pytest.mark.parametrize("version, match", [(1, "version 1 .*recompile"), (99, "unknown module format version"),
                                            (None, "unknown module format version")])
def test_old_and_unknown_versions_are_refused(saved, tmp_path, version, match):
    manifest, arrays = read_module(saved[0])
    manifest["version"] = version
    raw_save(tmp_path / "v.vtamod", manifest, arrays)
    refused(tmp_path / "v.vtamod", match)


# ------------------------------------------------------------- fields, hashes recomputed
def _block32(m, a):
    m["config"].update(block_in=32, block_out=32)


def _block32_everywhere(m, a):  # the activation buffers follow, so only the packed sizes tell
    _block32(m, a)
    m["plan"]["slots"] = {k.replace("@16", "@32"): v for k, v in m["plan"]["slots"].items()}
    for t in m["tasks"]:
        for act in t.get("acts", {}).values():
            act[1] = 32
        if "bind" in t:
            t["bind"] = {k: v.replace("@16", "@32") for k, v in t["bind"].items()}


def _reloc(value):
    def edit(m, a):
        t = vta_task(m)
        a[f"relocs/{t['node']}/{t['program']['relocs'][0]}"] = np.asarray(value, np.int64)
    return edit


def _drop_reloc(m, a):
    t = vta_task(m)
    name = t["program"]["relocs"].pop()
    del a[f"relocs/{t['node']}/{name}"]


def _words(edit_words):
    def edit(m, a):
        key = f"words/{vta_task(m)['node']}"
        a[key] = edit_words(a[key])
    return edit


def _first_load(field: str, value: int):
    """The first LOAD's `field` set to `value` (still a valid encoding)."""
    def edit(words):
        cfg = HwConfig.preset("pynq")
        opcode, f = mem_layout(cfg)["opcode"], mem_layout(cfg)[field]
        codes = (words[:, 0] >> np.uint64(opcode.offset)) & np.uint64(opcode.mask)
        i = int(np.flatnonzero(codes == Opcode.LOAD)[0])
        words = words.copy()
        words[i, 0] = (words[i, 0] & ~np.uint64(f.mask << f.offset)) | (np.uint64(value) << np.uint64(f.offset))
        return words
    return edit


def _slot(key_part, index, value):
    def edit(m, a):
        key = next(k for k in m["plan"]["slots"] if key_part in k)
        m["plan"]["slots"][key][index] = value
    return edit


def _set(path, value):
    def edit(m, a):
        obj = m
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return edit


def _node(i, key, value):
    return _set(("graph", "nodes", i, key), value)


def _swap_tasks(m, a):
    m["tasks"][2], m["tasks"][3] = m["tasks"][3], m["tasks"][2]


def _array(name, value):
    return lambda m, a: a.__setitem__(name, value)


def _del(path):
    def edit(m, a):
        obj = m
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]
    return edit


def _act(index, value):
    """One field of the first task's first activation buffer changed, its binding following."""
    def edit(m, a):
        t = vta_task(m)
        name, act = next(iter(t["acts"].items()))
        act[index] = value
        t["bind"][name] = ActBuffer(*act).key
    return edit


CASES = {
    # the stored config
    "block size": (_block32, "blocks"),
    "block size, buffers renamed to match": (_block32_everywhere, "under the config"),
    "config value": (_set(("config", "batch"), 0), "stored config"),
    "config type": (_set(("config",), [1, 2]), "stored config"),
    # relocations
    "negative relocation": (_reloc([-1]), "indexes outside"),
    "0-d relocation": (_reloc(3), "1-D integer array"),
    "relocation past the end": (_reloc([10_000]), "indexes outside"),
    "float relocation": (lambda m, a: _reloc([0])(m, a) or a.update(
        {k: v.astype(np.float64) for k, v in a.items() if k.startswith("relocs/")}), "1-D integer array"),
    "relocation dropped": (_drop_reloc, "without a relocation|not the plan|bindings"),
    "relocation of an unknown tensor": (lambda m, a: vta_task(m)["program"]["relocs"].append("nope"), "malformed"),
    # instructions
    "instruction count": (_words(lambda w: w[:-3]), "plan|indexes outside"),
    "instruction past its buffer": (_words(_first_load("dram_base", 1 << 20)), "reaches byte"),
    "instruction past its on-chip buffer": (_words(_first_load("sram_base", 60_000)), "on-chip entry"),
    "undecodable instruction": (_words(lambda w: np.full_like(w, np.uint64(7))), "does not decode"),
    "instruction dtype": (_words(lambda w: w.astype(np.int64)), r"\(n, 2\) uint64"),
    # the DRAM plan
    "slot offset": (_slot("code:", 0, 0), "plan"),
    "slot size": (_slot("const:", 1, 1 << 40), "plan"),
    "negative slot": (_slot("act:", 0, -4096), "plan"),
    "arena size": (_set(("plan", "arena_bytes"), 1 << 50), "plan"),
    "slot type": (_slot("act:", 0, "0"), "plan"),
    # constants
    "graph constant shape": (_array("graph/fc.bias_q", np.zeros(3, np.int32)), "fc.bias_q"),
    "graph constant dtype": (_array("graph/fc.bias_q", np.zeros(10, np.float32)), "fc.bias_q"),
    "packed constant size": (_array("packed/const:fc.bias", np.zeros(8, np.uint8)), "fc.bias"),
    "packed constant dtype": (_array("packed/const:fc.bias", np.zeros(64, np.int32)), "fc.bias"),
    "stray array": (_array("extra", np.zeros(1)), "unknown array"),
    "missing array": (lambda m, a: a.pop("words/conv2"), "words/conv2"),
    # graph references
    "unknown input tensor": (_node(2, "inputs", ["nope", "conv1.weight_q", "conv1.bias_q"]), "not computed"),
    "unknown op": (_node(0, "op", "Evil"), "no definition"),
    "nodes reordered": (lambda m, a: m["graph"]["nodes"].reverse(), "not computed"),
    "tasks reordered": (_swap_tasks, "not the graph's nodes"),
    "unknown graph output": (_set(("graph", "outputs"), ["nope"]), "never computed"),
    "graph input is a constant": (_set(("graph", "inputs"), ["fc.bias_q"]), "graph input"),
    "attribute type": (_node(2, "attrs", {"kernel": "x"}), "conv1"),
    "tensor shape": (_set(("graph", "tensors", "relu1.q", 0), [1, 16, 9, 8]), "relu1.q"),
    "tensor shape type": (_set(("graph", "tensors", "relu1.q", 0), ["a"]), "relu1.q' shape"),
    "tensor dtype": (_set(("graph", "tensors", "data", 1), "object"), "dtype"),
    "task op": (lambda m, a: vta_task(m).update(op="Relu"), "accelerator op"),
    "act buffer": (lambda m, a: next(iter(vta_task(m)["acts"].values())).__setitem__(0, "fc.bias_q"),
                   "its buffer is"),
    "act tensor": (_act(0, "fc.bias_q"), "not one of the node's"),
    "act planes": (_act(2, 3), "blocks"),
    "act packing": (_act(3, "x/1"), "packing"),
    "tensor spec shape": (lambda m, a: vta_task(m)["program"]["tensors"]["weight"].update(shape=[2, 2]),
                          "under the config"),
    "tensor spec memory": (lambda m, a: vta_task(m)["program"]["tensors"]["weight"].update(mem=99), "mem"),
    "bind to a missing buffer": (lambda m, a: vta_task(m)["bind"].update(weight="const:nope"), "does not hold"),
    "missing task key": (lambda m, a: vta_task(m).pop("acts"), "malformed"),
    "missing manifest key": (_del(("plan",)), "plan"),
    "tasks not a list": (_set(("tasks",), {"a": 1}), "tasks"),
    "target": (_set(("target",), "evil"), "target"),
    "host target with accelerator tasks": (_set(("target",), "cpu"), "accelerator tasks"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tampered_field_is_one_error_before_any_run(saved, tmp_path, case, monkeypatch):
    edit, match = CASES[case]
    path = tampered(saved, tmp_path, edit)
    from vtakit.compiler.module import runner

    monkeypatch.setattr(runner, "bind", lambda *a: pytest.fail("a tampered module reached a device"))
    refused(path, match, trust=True)


# ------------------------------------------------------------- the archive itself
def test_decompressed_size_is_capped(saved, tmp_path):
    bomb = tmp_path / "bomb.vtamod"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:  # ~50 KB that declares 64 MiB
        z.writestr("graph|w.npy", np.lib.format.magic(1, 0) + b"\0" * (64 << 20))
    assert bomb.stat().st_size < 200_000
    with pytest.raises(CompileError, match="expands to more than 16 MB.*max-module-mb"):
        CompiledModule.load(bomb, max_bytes=16 << 20)
    path = saved[0]
    with pytest.raises(CompileError, match="expands to more than"):
        CompiledModule.load(path, max_bytes=1000)
    CompiledModule.load(path, max_bytes=1 << 30)


def test_the_cap_comes_from_the_environment(saved, monkeypatch):
    monkeypatch.setenv("VTAKIT_MAX_MODULE_MB", "0.001")
    with pytest.raises(CompileError, match="expands to more than"):
        CompiledModule.load(saved[0])
    monkeypatch.setenv("VTAKIT_MAX_MODULE_MB", "nan")
    with pytest.raises(CompileError, match="VTAKIT_MAX_MODULE_MB"):
        CompiledModule.load(saved[0])


def test_a_member_whose_header_lies_about_its_size(saved, tmp_path):
    """A .npy header declaring a huge array over 40 bytes of data: refused before anything is allocated."""
    bad = tmp_path / "lie.vtamod"
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<i4", "fortran_order": False, "shape": (1 << 40,)})
    with zipfile.ZipFile(saved[0]) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "graph|fc.bias_q.npy":
                data = head.getvalue() + data[-40:]
            dst.writestr(info, data)
    with pytest.raises(CompileError, match="fc.bias_q.*declares"):
        CompiledModule.load(bad)


def test_object_arrays_and_non_archives_are_refused(tmp_path):
    obj = tmp_path / "obj.vtamod"
    with open(obj, "wb") as f:
        np.savez(f, manifest=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CompileError, match="not numbers|not a vtakit module"):
        CompiledModule.load(obj)
    with pytest.raises(CompileError, match="is not a regular file"):
        CompiledModule.load(tmp_path)


# ------------------------------------------------------------- run inputs
def test_nan_and_inf_inputs_warn_or_fail_with_strict(saved):
    path, x, want = saved
    module = CompiledModule.load(path)
    bad = x.copy()
    bad[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    with pytest.warns(NonFiniteInputWarning, match="1 NaN and 2 infinite"):
        module.run(bad, device="fsim")
    with pytest.raises(CompileError, match="1 NaN and 2 infinite"):
        module.run(bad, device="fsim", strict=True)
    with pytest.raises(CompileError, match="infinite"), np.errstate(over="ignore"):
        module.run(np.full_like(x, 1e39, dtype=np.float64), device="cpu", strict=True)  # inf once float32
    assert np.array_equal(module.run(x, device="fsim", strict=True)["logits"], want)


def test_wrong_inputs_are_one_error(saved):
    module = CompiledModule.load(saved[0])
    x = saved[1]
    for inputs, match in [({"nope": x}, "no value for input 'data'"), ({1: x}, "named by strings"),
                          ({"data": [[1], [1, 2]]}, "not an array"), (x[0], "shape"),
                          (x.astype(np.int32), "int32"), ({"data": x, "more": x}, "unknown inputs")]:
        with pytest.raises(CompileError, match=match):
            module.run(inputs, device="fsim")


def test_cli_run_refuses_a_tampered_module_in_one_line(saved, tmp_path, capsys):
    path = tampered(saved, tmp_path, _reloc([-1]))
    np.save(tmp_path / "x.npy", saved[1])
    for trust, why in ([], "not signed by this machine's key"), (["--trust"], "relocation"):
        assert main(["run", path, "--input", str(tmp_path / "x.npy"), "--device", "fsim", *trust]) == 1
        out, err = capsys.readouterr()
        assert err.startswith("error: ") and err.count("\n") == 1 and why in err
        assert "ran " not in out


def test_cli_run_strict_output_folders_and_warnings(saved, tmp_path, capsys):
    path, x, want = saved
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    np.save(tmp_path / "bad.npy", bad)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "new" / "deeper" / "y.npy"
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--device", "fsim", "--output", str(out)]) == 0
    assert np.array_equal(np.load(out), want)
    capsys.readouterr()
    assert main(["run", str(path), "--input", str(tmp_path / "bad.npy"), "--device", "fsim"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "NaN" in err and err.count("\n") == 1
    assert main(["run", str(path), "--input", str(tmp_path / "bad.npy"), "--strict"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "NaN" in err and err.count("\n") == 1
    (tmp_path / "file").write_text("")
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--output",
                 str(tmp_path / "file" / "y.npy")]) == 1
    assert capsys.readouterr().err.startswith("error: cannot write the outputs")
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--max-module-mb", "0.001"]) == 1
    assert "expands to more than" in capsys.readouterr().err


def test_save_makes_missing_folders_and_reports_unwritable_paths(saved, tmp_path):
    module = CompiledModule.load(saved[0])
    path = module.save(tmp_path / "new" / "folder" / "d.vtamod")
    assert path.is_file() and CompiledModule.load(path).run(saved[1], device="fsim")["logits"].shape
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CompileError, match="cannot write module file"):
        module.save(blocker / "d.vtamod")


def test_a_module_path_that_is_not_a_regular_file_is_refused_without_reading(tmp_path):
    """open() of a FIFO blocks until a writer comes; /dev/zero never ends."""
    import os

    fifo = tmp_path / "m.vtamod"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        with pytest.raises(CompileError, match="not a regular file"):
            CompiledModule.load(path)
