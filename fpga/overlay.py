"""Overlay files and the checks that a bitstream fits the configuration a program was built for.

An overlay is what `pynq.Overlay` loads: `<stem>.bit` with `<stem>.hwh` beside it.  Projects
written by `vtakit fpga project` add `<stem>.json`, the HwConfig the RTL was generated from, so a
bitstream built for one configuration cannot silently run programs compiled for another.  VTA's
own HLS bitstreams carry no such file; for them the rule is VTA's: the file is named after the
configuration (`1x16_i8w8a32_15_15_18_17.bit`).  Simulated bitstreams (for the simulated board)
carry the configuration in the .bit's data field, where a real one carries the configured logic.
"""

from __future__ import annotations

import json
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from vtakit.errors import ConfigError, DeviceError
from vtakit.hw.boards import BoardPreset
from vtakit.isa.config import HwConfig

SIDECAR_FORMAT = "vtakit-overlay/1"
SIM_MAGIC = b"VTAKIT-SIMULATED-BITSTREAM/1\n"
OVERLAY_ENV = "VTAKIT_OVERLAY"
CONFIG_PARAMETER, FINGERPRINT_PARAMETER = "C_VTAKIT_CONFIG", "C_VTAKIT_FINGERPRINT"
"""IP parameters of the packaged accelerator (fpga.project), so the .hwh names the configuration."""


@dataclass(frozen=True)
class OverlayFiles:
    bit: Path
    hwh: Path
    sidecar: Path | None

    @property
    def stem(self) -> str:
        return self.bit.stem


def overlay_files(path: str | Path) -> OverlayFiles:
    """The .bit, .hwh and (optional) .json of an overlay given its .bit path or stem."""
    p = Path(path).expanduser()
    bit = p if p.suffix == ".bit" else p.with_name(p.name + ".bit")
    if not bit.is_file():
        raise DeviceError(f"bitstream {bit} not found")
    hwh = bit.with_suffix(".hwh")
    if not hwh.is_file():
        raise DeviceError(f"{hwh.name} is missing next to {bit}: pynq.Overlay reads the block design "
                          f"(where the accelerator's registers are) from the .hwh of the same name")
    sidecar = bit.with_suffix(".json")
    return OverlayFiles(bit.resolve(), hwh.resolve(), sidecar.resolve() if sidecar.is_file() else None)


def sidecar_dict(board: BoardPreset, cfg: HwConfig, flavour: str) -> dict:
    return {"format": SIDECAR_FORMAT, "board": board.name, "part": board.part, "register_map": flavour,
            "register_base": f"{board.register_base:#010x}", "config_label": cfg.label,
            "fingerprint": cfg.fingerprint(), "config": cfg.to_dict()}


def read_sidecar(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        if data.get("format") != SIDECAR_FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, not {SIDECAR_FORMAT!r}")
        HwConfig.from_dict(data["config"])
        return data
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ConfigError) as e:
        raise DeviceError(f"{path}: not a vtakit overlay description ({e})") from None


# ------------------------------------------------------------------ .bit files
def write_bit(path: str | Path, design: str, part: str, data: bytes) -> Path:
    """A .bit in Xilinx's header format (the fields pynq's parse_bit_header reads)."""
    def field(key: bytes, text: str) -> bytes:
        raw = text.encode() + b"\0"
        return key + struct.pack(">H", len(raw)) + raw

    data = data + b"\0" * (-len(data) % 4)
    head = struct.pack(">H", 9) + bytes([0x0F, 0xF0] * 4 + [0x00]) + struct.pack(">H", 1)
    body = (field(b"a", f"{design};UserID=0XFFFFFFFF;Version=vtakit") + field(b"b", part)
            + field(b"c", time.strftime("%Y/%m/%d")) + field(b"d", time.strftime("%H:%M:%S"))
            + b"e" + struct.pack(">I", len(data)) + data)
    path = Path(path)
    path.write_bytes(head + body)
    return path


def read_bit_header(path: Path) -> dict:
    """design, part, date, time and data of a .bit (pynq's own header parser)."""
    from pynq.pl_server.embedded_device import parse_bit_header  # lazy: pynq

    try:
        return parse_bit_header(path.read_bytes())
    except (RuntimeError, struct.error, IndexError, UnicodeDecodeError) as e:
        raise DeviceError(f"{path} is not a Xilinx bitstream ({e or 'bad header'})") from None


def simulated_config(header: dict) -> HwConfig | None:
    """The configuration a simulated bitstream carries; None for a real bitstream."""
    data = header.get("data", b"")
    if not data.startswith(SIM_MAGIC):
        return None
    try:
        return HwConfig.from_dict(json.loads(data[len(SIM_MAGIC):].rstrip(b"\0").decode()))
    except (ValueError, ConfigError) as e:
        raise DeviceError(f"simulated bitstream {header.get('design', '?')} carries a bad config ({e})") from None


def sim_bit_data(cfg: HwConfig) -> bytes:
    return SIM_MAGIC + json.dumps(cfg.to_dict(), sort_keys=True).encode()


def bit_part_code(part: str) -> str:
    """The part as a .bit header spells it: no `xc`, no speed grade (`7z020clg400`)."""
    return "".join(p for p in part.lower().removeprefix("xc").split("-") if len(p) > 2)


# ------------------------------------------------------------------ checks
def overlay_config(files: OverlayFiles, header: dict | None = None) -> tuple[HwConfig | None, str]:
    """The configuration an overlay was built for, if it says, and where that was read."""
    if files.sidecar is not None:
        return HwConfig.from_dict(read_sidecar(files.sidecar)["config"]), files.sidecar.name
    cfg = simulated_config(header if header is not None else read_bit_header(files.bit))
    return cfg, f"{files.bit.name} (simulated)"


def check_overlay(files: OverlayFiles, cfg: HwConfig, board: BoardPreset | None = None) -> dict:
    """DeviceError unless the overlay was built for `cfg` (and `board`'s part); returns its header."""
    header = read_bit_header(files.bit)
    part = str(header.get("part", ""))
    if board is not None and board.device.removeprefix("xc") not in part.lower():
        raise DeviceError(f"{files.bit.name} is for part {part or '?'}, the {board.title} has {board.part}")
    if files.sidecar is not None and board is not None:
        built_for = read_sidecar(files.sidecar).get("board")
        if built_for != board.name:
            raise DeviceError(f"{files.bit.name} was built for the {built_for} board, not the {board.name}")
    built, where = overlay_config(files, header)
    if built is not None:
        if built.fingerprint() != cfg.fingerprint():
            raise DeviceError(f"{files.bit.name} was built for config {built.label} (fingerprint "
                              f"{built.fingerprint()}, per {where}), the program for {cfg.label} "
                              f"({cfg.fingerprint()}): build a bitstream with `vtakit fpga project --config "
                              f"{cfg.label}` or compile with --config {built.label}")
    elif files.stem != cfg.bitstream_name:
        raise DeviceError(f"{files.bit.name} has no {files.stem}.json saying which config it implements, and "
                          f"its name is not VTA's bitstream name for {cfg.label} ({cfg.bitstream_name}.bit)")
    return header


def check_hwh_config(ip_dict: dict, cfg: HwConfig, name: str) -> None:
    """DeviceError if the overlay's accelerator IP carries another configuration's fingerprint
    (the IP parameter the generated project sets; VTA's HLS IPs have none)."""
    for ip, entry in ip_dict.items():
        params = entry.get("parameters") or {}
        fingerprint = params.get(FINGERPRINT_PARAMETER)
        if fingerprint and fingerprint != cfg.fingerprint():
            raise DeviceError(f"{name}: IP {ip} was generated for config {params.get(CONFIG_PARAMETER, '?')} "
                              f"(fingerprint {fingerprint}), the program for {cfg.label} ({cfg.fingerprint()})")


def find_overlay(cfg: HwConfig) -> Path:
    """The overlay for `cfg` on this board: $VTAKIT_OVERLAY, else a matching .bit in the overlay dirs."""
    if os.environ.get(OVERLAY_ENV):
        return Path(os.environ[OVERLAY_ENV])
    home = Path.home() / ".vtakit" / "overlays"
    for directory in (home, Path.cwd()):
        for bit in sorted(directory.glob("*.bit")) if directory.is_dir() else []:
            sidecar = bit.with_suffix(".json")
            if sidecar.is_file():
                try:
                    if read_sidecar(sidecar)["fingerprint"] == cfg.fingerprint():
                        return bit
                except DeviceError:
                    continue
            elif bit.stem == cfg.bitstream_name:
                return bit
    raise DeviceError(f"no overlay for config {cfg.label}: set ${OVERLAY_ENV} to its .bit or copy the "
                      f".bit/.hwh/.json into {home} (see docs/fpga.md)")
