"""Reading configuration files as untrusted input: size, encoding and JSON checked before parsing.

A config file comes from anywhere (a download, a colleague, a fuzzer); whatever
is wrong with it must be one ConfigError naming the file, and never a number
JSON does not allow (NaN, Infinity) or a huge value echoed into a message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vtakit.errors import ConfigError

MAX_CONFIG_FILE_BYTES = 1 << 20
"""A configuration is a few hundred bytes; a bigger file is not one (and is not read whole)."""


def show(value: Any, limit: int = 60) -> str:
    """A value for an error message, cut short (a hostile file must not become a huge message)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _reject_constant(name: str) -> Any:
    raise ConfigError(f"{name} is not a number JSON allows (configs take finite numbers only)")


def read_json(path: Path) -> Any:
    """The JSON value of a config file; every way it can fail is one ConfigError naming the file."""
    try:
        if Path(path).exists() and not Path(path).is_file():  # a FIFO would block, a device never end
            raise ConfigError(f"config file {str(path)!r} is not a regular file")
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(path)!r}: {e.strerror}") from None
    if len(raw) > MAX_CONFIG_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_FILE_BYTES >> 20} MiB, not a configuration")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    except (RecursionError, ValueError):     # nesting too deep, integers of too many digits
        raise ConfigError(f"{path}: not valid JSON (nested too deeply or a number too long)") from None
