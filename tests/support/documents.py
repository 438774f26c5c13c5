"""Text images for the OCR networks: seeded rendered pages for calibration, scikit-image's scans to test.

A text detector calibrated on photos of scenes sees none of the sharp, high-contrast strokes it is
built for, so its calibration samples are pages rendered here with matplotlib (seeded words, sizes,
positions, ink and paper shades).  Its test images are views of a real scan this repository did not
make: scikit-image's `page` (a book page), whole and in crops.
"""

from __future__ import annotations

import numpy as np

THRESHOLD = 0.3
"""DBNet's binarization threshold: pixels of the probability map above it are text."""
WORDS = ("accelerator", "tensor", "buffer", "load", "store", "compute", "the", "of", "and", "scale", "int8",
         "channel", "kernel", "stride", "depthwise", "VTA", "2026", "page", "model", "float", "shift", "DRAM",
         "a", "to", "in", "is", "network", "photo", "text", "detector", "quantize", "exponent", "Lorem", "ipsum")


def rendered_page(seed: int, size: int = 320) -> np.ndarray:
    """A size x size RGB float image in [0, 1]: lines of seeded words on a plain background."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    paper, ink = rng.uniform(0.75, 1.0), rng.uniform(0.0, 0.35)
    if rng.random() < 0.25:  # light text on a dark sign
        paper, ink = 1 - paper, 1 - ink
    fig = plt.figure(figsize=(size / 100, size / 100), dpi=100)
    fig.patch.set_facecolor((paper,) * 3)
    y = rng.uniform(0.9, 0.97)
    while y > 0.05:
        points = rng.uniform(7, 22)
        x = rng.uniform(0.0, 0.15)
        line = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 8))))
        fig.text(x, y, line, fontsize=points, color=(ink,) * 3, family="DejaVu Sans",
                 weight="bold" if rng.random() < 0.3 else "normal", va="top")
        y -= points / 72 * 100 / size * rng.uniform(1.3, 2.2)
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba(), dtype=np.float32)[..., :3] / 255.0
    plt.close(fig)
    return rgba[:size, :size]


def calibration_pages(count: int = 8, size: int = 320) -> list[np.ndarray]:
    return [rendered_page(1000 + i, size) for i in range(count)]


def test_scans(size: int = 320) -> list[tuple[str, np.ndarray]]:
    """(name, RGB float image) views of scikit-image's `page` scan (a book page, 191 x 384): whole, halves,
    and square crops at two scales.  (Its `text` photo is not used: the detector finds no text in it
    even in float.)"""
    from skimage import data
    from skimage.transform import resize

    img = data.page().astype(np.float32) / 255.0
    rgb = np.stack([img] * 3, axis=-1)
    h, w = rgb.shape[:2]
    views = {"whole": rgb, "left": rgb[:, :h], "right": rgb[:, w - h:], "middle": rgb[:, (w - h) // 2:(w + h) // 2],
             "top-left": rgb[: h // 2, : h // 2], "top-right": rgb[: h // 2, w - h // 2:],
             "bottom-left": rgb[h // 2:, : h // 2], "bottom-right": rgb[h // 2:, w - h // 2:]}
    return [(f"page/{k}", resize(v, (size, size), anti_aliasing=True).astype(np.float32)) for k, v in views.items()]


def map_agreement(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(cosine, IoU of the text pixels) of two text probability maps."""
    r, g = ref.ravel().astype(np.float64), got.ravel().astype(np.float64)
    cos = float(r @ g / (np.linalg.norm(r) * np.linalg.norm(g) + 1e-30))
    a, b = r > THRESHOLD, g > THRESHOLD
    union = np.count_nonzero(a | b)
    return cos, float(np.count_nonzero(a & b) / union) if union else 1.0


def text_strips(pages: list[np.ndarray], per_page: int, seed: int, height: int = 48, width: int = 320
                ) -> list[np.ndarray]:
    """Seeded horizontal strips (an eighth of a page high, full width) resized to height x width: the
    text-line inputs of PP-OCR's direction classifier and recognizer."""
    from skimage.transform import resize

    rng = np.random.default_rng(seed)
    strips = []
    for page in pages:
        h = page.shape[0]
        for _ in range(per_page):
            top = int(rng.integers(0, h - h // 8))
            strips.append(resize(page[top: top + h // 8], (height, width), anti_aliasing=True).astype(np.float32))
    return strips
