"""Real photographs for accuracy measurements: the sample images scikit-image and scikit-learn ship.

Test views (24): the centre square crop of 12 photos and its mirror image.
Calibration views: seeded random square crops of 8 other photos, so no test
photo is seen during calibration.  Grey photos are repeated over RGB.
Everything is deterministic for a given seed.
"""

from __future__ import annotations

import numpy as np

TEST_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "china", "flower",
               "camera", "clock", "coins", "moon", "immunohistochemistry", "hubble_deep_field")
CALIBRATION_PHOTOS = ("retina", "colorwheel", "cell", "brick", "grass", "gravel", "text", "page")
SIZE = 224


def photo(name: str) -> np.ndarray:
    """One bundled photo as uint8 (H, W, 3)."""
    if name in ("china", "flower"):
        from sklearn.datasets import load_sample_image

        img = load_sample_image(f"{name}.jpg")
    else:
        import skimage.data

        img = getattr(skimage.data, name)()
    img = np.asarray(img)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    return img[:, :, :3].astype(np.uint8)


def square_view(img: np.ndarray, top: int, left: int, side: int, size: int = SIZE) -> np.ndarray:
    """A side x side crop resized (anti-aliased) to size x size, uint8."""
    from skimage.transform import resize

    crop = img[top:top + side, left:left + side].astype(np.float64) / 255.0
    out = resize(crop, (size, size, 3), order=1, anti_aliasing=side > size)
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)


def test_views(size: int = SIZE) -> list[tuple[str, np.ndarray]]:
    """(label, uint8 image) for the centre crop and mirrored centre crop of each test photo."""
    out = []
    for name in TEST_PHOTOS:
        img = photo(name)
        side = min(img.shape[:2])
        top, left = (img.shape[0] - side) // 2, (img.shape[1] - side) // 2
        view = square_view(img, top, left, side, size)
        out += [(f"{name}/centre", view), (f"{name}/mirror", view[:, ::-1].copy())]
    return out


def calibration_views(count: int = 8, seed: int = 0, size: int = SIZE) -> list[tuple[str, np.ndarray]]:
    """`count` seeded random crops (60-100 % of the short side, maybe mirrored) of the calibration photos."""
    return random_views(CALIBRATION_PHOTOS, count, seed, 0.6, size)


def random_views(names: tuple[str, ...], count: int, seed: int, smallest: float,
                 size: int = SIZE) -> list[tuple[str, np.ndarray]]:
    """`count` seeded random square crops (`smallest`-100 % of the short side, mirrored at random) of the
    photos `names`, taken in turn: more test views than the 24 fixed ones (e.g. of TEST_PHOTOS)."""
    rng = np.random.default_rng(seed)
    images = {name: photo(name) for name in names}
    out = []
    for i in range(count):
        name = names[i % len(names)]
        img = images[name]
        side = int(min(img.shape[:2]) * rng.uniform(smallest, 1.0))
        top = int(rng.integers(0, img.shape[0] - side + 1))
        left = int(rng.integers(0, img.shape[1] - side + 1))
        view = square_view(img, top, left, side, size)
        out.append((f"{name}/crop{i}", view[:, ::-1].copy() if rng.random() < 0.5 else view))
    return out
