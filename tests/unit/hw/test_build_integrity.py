"""A cached libvta.so is checked against the SHA-256 its build recorded before it is loaded
(issue 37, cause 13); a changed, truncated or unrecorded library is rebuilt.  The Verilator
and compiler steps are replaced by a stand-in, so no real build runs."""

import pytest

import vtakit.hw.build as hw_build
from vtakit.isa import HwConfig

PYNQ = HwConfig.preset("pynq")


@pytest.fixture
def fake_toolchain(tmp_path, monkeypatch):
    """Builds into a fresh cache; each "link" writes a library naming its build; returns the steps run."""
    monkeypatch.setenv("VTAKIT_CACHE", str(tmp_path))
    steps: list[str] = []

    def run(cmd, cwd, what, env=None):
        steps.append(what)
        if what == "harness link":
            (cwd / "libvta.so.tmp").write_bytes(b"\x7fELF stand-in library, build %d" % steps.count(what))

    monkeypatch.setattr(hw_build, "_run", run)
    return steps


def test_intact_cache_is_reused(fake_toolchain):
    lib = hw_build.build(PYNQ)
    assert fake_toolchain.count("harness link") == 1
    assert hw_build.digest_path(lib).read_text().strip() == hw_build._sha256(lib)
    assert hw_build.build(PYNQ) == lib and fake_toolchain.count("harness link") == 1


@pytest.mark.parametrize("damage", ["tampered", "same size", "truncated", "no record", "bad record"])
def test_damaged_cache_is_rebuilt_not_loaded(fake_toolchain, damage):
    lib = hw_build.build(PYNQ)
    good = lib.read_bytes()
    if damage == "tampered":
        lib.write_bytes(b"\x7fELF something else entirely")
    elif damage == "same size":
        lib.write_bytes(good[:-1] + b"X")
    elif damage == "truncated":
        lib.write_bytes(good[:10])
    elif damage == "no record":
        hw_build.digest_path(lib).unlink()
    else:
        hw_build.digest_path(lib).write_text("0" * 64 + "\n")
    assert not hw_build.intact(lib)
    assert hw_build.build(PYNQ) == lib
    assert fake_toolchain.count("harness link") == 2 and hw_build.intact(lib)
    assert lib.read_bytes() == good.replace(b"build 1", b"build 2")
