"""Task metrics of the corpus: how closely the int8 module's outputs do the float model's task.

Each takes the float outputs and the int8 outputs (one dict per test input) and returns named values
where higher is better, compared with the entry's floors.  Seeded networks have meaningless tasks, so
their metric is agreement with float (top-1, cosine, IoU of argmax masks); pretrained ones use their
task (detections matched at IoU 0.5, VAD decisions, notes).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tests.support.corpus.entry import Metric, Outputs


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    d = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / d) if d > 0 else float(np.array_equal(a, b))


def _pick(outs: list[Outputs], output: str | None) -> list[np.ndarray]:
    return [np.asarray(o[output] if output else next(iter(o.values()))) for o in outs]


def classifier(output: str | None = None, axis: int = -1) -> Metric:
    """Top-1 agreement along `axis` (every position of a per-timestep or per-token output counts) and the
    mean cosine of the whole output."""
    def metric(ref: list[Outputs], got: list[Outputs]) -> dict[str, float]:
        r, g = _pick(ref, output), _pick(got, output)
        top1 = np.mean(np.concatenate([(a.argmax(axis) == b.argmax(axis)).ravel() for a, b in zip(r, g)]))
        return {"top1": float(top1), "cosine": float(np.mean([_cos(a, b) for a, b in zip(r, g)]))}
    return metric


def embedding(output: str | None = None) -> Metric:
    """Mean cosine of the embeddings (or hidden states)."""
    def metric(ref: list[Outputs], got: list[Outputs]) -> dict[str, float]:
        return {"cosine": float(np.mean([_cos(a, b) for a, b in zip(_pick(ref, output), _pick(got, output))]))}
    return metric


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.count_nonzero(a | b)
    return float(np.count_nonzero(a & b) / union) if union else 1.0


def mask_iou(output: str | None = None, axis: int = 1) -> Metric:
    """Mean over classes present of the IoU of the argmax masks (segmentation against float)."""
    def metric(ref: list[Outputs], got: list[Outputs]) -> dict[str, float]:
        ious = []
        for a, b in zip(_pick(ref, output), _pick(got, output)):
            ma, mb = a.argmax(axis), b.argmax(axis)
            ious += [iou(ma == c, mb == c) for c in np.union1d(np.unique(ma), np.unique(mb))]
        return {"iou": float(np.mean(ious))}
    return metric


def threshold_iou(threshold: float, output: str | None = None) -> Metric:
    """IoU of the pixels (or notes) above `threshold`, pooled over the test inputs, and the output cosine."""
    def metric(ref: list[Outputs], got: list[Outputs]) -> dict[str, float]:
        r, g = _pick(ref, output), _pick(got, output)
        a = np.concatenate([x.ravel() > threshold for x in r])
        b = np.concatenate([x.ravel() > threshold for x in g])
        return {"iou": iou(a, b), "cosine": float(np.mean([_cos(x, y) for x, y in zip(r, g)]))}
    return metric


def decisions(threshold: float, output: str | None = None) -> Metric:
    """Fraction of the per-input decisions (probability above `threshold`) that match float's."""
    def metric(ref: list[Outputs], got: list[Outputs]) -> dict[str, float]:
        a = np.concatenate([x.ravel() > threshold for x in _pick(ref, output)])
        b = np.concatenate([x.ravel() > threshold for x in _pick(got, output)])
        return {"decisions": float(np.mean(a == b))}
    return metric


def note_f1(threshold: float, output: str) -> Metric:
    """F1 of the (frame, pitch) cells above `threshold` against float's, pooled over the inputs."""
    def metric(ref: list[Outputs], got: list[Outputs]) -> dict[str, float]:
        a = np.concatenate([x.ravel() > threshold for x in _pick(ref, output)])
        b = np.concatenate([x.ravel() > threshold for x in _pick(got, output)])
        tp = np.count_nonzero(a & b)
        denom = np.count_nonzero(a) + np.count_nonzero(b)
        return {"f1": float(2 * tp / denom) if denom else 1.0}
    return metric


Boxes = Callable[[Outputs], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""An output dict -> (boxes (N, 4) as x0, y0, x1, y1; scores (N,); classes (N,)) after the score threshold."""


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of x0, y0, x1, y1 boxes."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter + 1e-12)


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, overlap: float = 0.5
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy per-class non-maximum suppression (what a detector's user runs after the network)."""
    keep: list[int] = []
    for i in np.argsort(-scores):
        if all(classes[j] != classes[i] or box_iou(boxes[i:i + 1], boxes[j:j + 1])[0, 0] <= overlap for j in keep):
            keep.append(int(i))
    k = np.array(keep, dtype=np.int64)
    return boxes[k], scores[k], classes[k]


def detections(decode: Boxes) -> Metric:
    """Recall and precision of the int8 detections against float's: a pair matches when it has the same class
    and IoU >= 0.5 (greedy, best score first)."""
    def metric(ref: list[Outputs], got: list[Outputs]) -> dict[str, float]:
        found = matched = expected = 0
        for r, g in zip(ref, got):
            rb, _, rc = decode(r)
            gb, gs, gc = decode(g)
            expected, found = expected + len(rb), found + len(gb)
            free = np.ones(len(rb), bool)
            for i in np.argsort(-gs):
                if not len(rb):
                    break
                ious = box_iou(gb[i:i + 1], rb)[0] * free * (rc == gc[i])
                j = int(ious.argmax())
                if ious[j] >= 0.5:
                    free[j] = False
                    matched += 1
        return {"recall": matched / expected if expected else 1.0,
                "precision": matched / found if found else 1.0, "detections": float(expected)}
    return metric
