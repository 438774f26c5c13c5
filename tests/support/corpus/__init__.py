"""Issue 39's model corpus: real networks of the kinds users bring, each with real inputs, a task metric and
the floors it must reach (benchmarks/model_corpus.py prints the table, tests/integration/test_model_corpus.py
asserts the floors).

The split: every model is in the development half (others develop the compiler on it) or the HELD-OUT half
(reported, never tuned on).  It alternates within each kind in the order the entries are listed (wheel
models, then seeded architectures), so each half holds each kind and neither half was chosen by how a
model does: 11 + 11 (classifiers 5 + 4, detectors 1 + 1, segmentation 1 + 1, OCR 1 + 2, audio 2 + 2,
text 1 + 1).  Issue 40's three transformers (DeiT-tiny distilled, GPT-2 2 layers x seq 128, the Whisper-tiny
encoder) were added to the held-out half alone, since the transformer work is developed on hf_deit_tiny and
hf_bert_mini: 11 + 14 in all (classifiers 5 + 5, audio 2 + 3, text 1 + 2).
"""

from __future__ import annotations

from tests.support.corpus import seeded, wheels
from tests.support.corpus.entry import HALVES, Entry


def entries(half: str = "all", only: tuple[str, ...] = ()) -> list[Entry]:
    """The corpus (a half of it, or the models named in `only`)."""
    every = wheels.entries() + seeded.entries()
    names = {e.name for e in every}
    unknown = sorted(set(only) - names)
    if unknown:
        raise ValueError(f"no corpus model {unknown[0]!r}; the corpus: {', '.join(sorted(names))}")
    if half not in HALVES + ("all",):
        raise ValueError(f"half must be dev, heldout or all, got {half!r}")
    return [e for e in every if (half == "all" or e.half == half) and (not only or e.name in only)]
