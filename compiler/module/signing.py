"""Signing `.vtamod` modules with a per-user secret key, so a module edited by someone else is refused.

The manifest holds the sha256 of every array, so an HMAC-SHA256 of the manifest authenticates the
whole module.  Hashes alone stop accidents, not an attacker, who can recompute them; without this
key nobody can produce a signature that verifies.  The key is 32 random bytes (64 hex digits) at
`$VTAKIT_KEY_FILE`, or else `~/.config/vtakit/module.key`, made on the first save with mode 0600.
A module compiled on another machine (a PC, for a board) runs there once the key file is copied
over, or with `vtakit run --trust` / `CompiledModule.load(path, trust=True)`, which still checks
every hash and every field.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

from vtakit.errors import CompileError

KEY_ENV = "VTAKIT_KEY_FILE"
KEY_BYTES = 32
_DOMAIN = b"vtakit-module-signature-v1\0"  # a signature of a module is never valid for anything else
_KEY_TEXT = re.compile(r"[0-9a-f]{64}")


def key_path() -> Path:
    """Where this user's key lives: $VTAKIT_KEY_FILE, else ~/.config/vtakit/module.key."""
    env = os.environ.get(KEY_ENV)
    return Path(env) if env else Path.home() / ".config" / "vtakit" / "module.key"


def key_id(key: bytes) -> str:
    """A short public name of a key (a hash of it), so a refusal can say which key signed a module."""
    return hashlib.sha256(b"vtakit-key-id\0" + key).hexdigest()[:16]


def read_key(path: Path) -> bytes | None:
    """The key in `path`, None when there is no such file; a file others can read, not a regular
    file, not the user's own or not 64 hex digits is one CompileError line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CompileError(f"cannot read the module key file {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)  # the checks are of the file opened, not of what the name points to later
        if not stat.S_ISREG(st.st_mode):
            raise CompileError(f"the module key file {path} is not a regular file")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise CompileError(f"the module key file {path} belongs to another user (uid {st.st_uid}); "
                               f"a key must be your own")
        if st.st_mode & 0o077:
            raise CompileError(f"the module key file {path} is accessible to other users (mode "
                               f"{stat.S_IMODE(st.st_mode):04o}): run `chmod 600 {path}`, or delete it if others "
                               f"may have read it (modules signed with it then need --trust)")
        text = os.read(fd, 200).decode("ascii", "replace").strip()
    except OSError as e:
        raise CompileError(f"cannot read the module key file {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    if not _KEY_TEXT.fullmatch(text):
        raise CompileError(f"the module key file {path} is malformed (it must hold {2 * KEY_BYTES} lowercase hex "
                           f"digits); delete it to make a new key")
    return bytes.fromhex(text)


def ensure_key(path: Path | None = None) -> bytes:
    """This user's key, created on first use.  The new key is written to a temporary file opened
    with O_EXCL and mode 0600, then hard-linked to its name, which fails if the name exists: two
    processes (pytest-xdist workers, parallel compiles) creating it at once end with one key, and
    nobody ever reads a half-written one."""
    path = key_path() if path is None else path
    key = read_key(path)
    if key is not None:
        return key
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_bytes(KEY_BYTES).hex() + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: everyone uses that one
    except OSError as e:
        raise CompileError(f"cannot create the module key file {path}: {e.strerror or e} (set {KEY_ENV} to "
                           f"a file on a local disk)") from None
    finally:
        tmp.unlink(missing_ok=True)
    key = read_key(path)
    if key is None:  # linked a moment ago (by us or another process), then deleted by someone
        raise CompileError(f"the module key file {path} vanished as it was created")
    return key


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, _DOMAIN + body, hashlib.sha256).hexdigest()


def signature(body: bytes) -> dict[str, str]:
    """The signature entry of a manifest whose canonical bytes are `body`, with this user's key."""
    key = ensure_key()
    return {"key": key_id(key), "hmac": _mac(key, body)}


def verify(path, signed: Any, body: bytes) -> None:
    """CompileError unless `signed` (a manifest's signature entry) is this user's key's HMAC of `body`."""
    where = key_path()
    key = read_key(where)
    if not isinstance(signed, dict) or not isinstance(signed.get("hmac"), str):
        why = "it carries no signature"
    elif key is None:
        why = f"there is no key at {where}"
    elif signed.get("key") != key_id(key):
        why = f"it was signed with key {str(signed.get('key'))[:16]}, this machine's is {key_id(key)}"
    elif hmac.compare_digest(signed["hmac"], _mac(key, body)):
        return
    else:
        why = "its signature does not match its contents"
    raise CompileError(f"{path}: not signed by this machine's key ({why}): it may have been edited, or compiled "
                       f"elsewhere; if you trust where it came from, run it with `vtakit run --trust` "
                       f"(CompiledModule.load(path, trust=True)), or copy the compiling machine's key file to {where}")
