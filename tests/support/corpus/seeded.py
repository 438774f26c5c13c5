"""Corpus architectures from transformers with SEEDED weights (no wheel ships theirs), exported by torch's
default exporter as a user would (export.py).  The task of a seeded network means nothing, so each is
measured by its agreement with float on real inputs: top-1 and cosine for classifiers and language-model
logits, cosine for encoders' hidden states, IoU of argmax masks for segmentation, matched boxes for the
detector.  Sizes are the architectures' small published variants (DeiT-tiny, ConvNeXt-atto, RegNetY-400MF,
MobileViT-XXS, SegFormer-B0, YOLOS-tiny) so that a run of the whole corpus stays within minutes a model.

(timm is not used: it imports torchvision, and no CPU build of torchvision matching torch 2.13 can be
installed here; PyPI's links CUDA libraries.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from tests.support.corpus import inputs, metrics
from tests.support.corpus.entry import CLASSIFIER, DETECTOR, EMBEDDING, MAP, Entry, Samples
from tests.support.corpus.export import cached_export
from tests.support.corpus.lsuv import lsuv

IMAGE = 224


SEEDING = "seed0-he-lsuv-norm1"
"""Part of each export's cache key: how the seeded weights are drawn (He-normal, norms' affine at 1 and 0,
then LSUV on the entry's calibration inputs: lsuv.py)."""


def variance_preserving(net):
    """Seeded He-normal weights for every convolution and linear layer, zero biases.  transformers initialises
    them with std 0.02 (for fine-tuning pretrained checkpoints), under which a deep convolutional network's
    activations shrink layer by layer to ~1e-22: an output no int8 grid can show, a meaningless measurement."""
    import torch  # pyright: ignore[reportMissingImports]

    for m in net.modules():
        if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear)):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, _norms(torch)):  # MobileViT draws its BN scales with std 0.02: near-dead channels
            if m.weight is not None:
                torch.nn.init.ones_(m.weight)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
    return net


def _norms(torch) -> tuple:
    """Normalisation layers, whose affine scale and shift a seeded network keeps at 1 and 0."""
    n = torch.nn
    return (n.BatchNorm1d, n.BatchNorm2d, n.LayerNorm, n.GroupNorm)


def _transformers(name: str, make: Callable[[Any], Any], args: Callable[[Any], tuple],
                  samples: Callable[[], Samples], pick: int = 0) -> Path:
    """Export transformers' `make(transformers)` (seeded by cached_export, then LSUV-initialised on the
    calibration inputs of `samples`), returning output `pick` only."""
    def build():
        import torch  # pyright: ignore[reportMissingImports]
        import transformers  # pyright: ignore[reportMissingImports]

        net = variance_preserving(make(transformers)).eval()

        class Exported(torch.nn.Module):  # what a user writes to export one output of a transformers model
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, *xs):
                return self.net(*xs)[pick]  # a ModelOutput indexes its fields that are set

        return lsuv(Exported().eval(), samples().calibration), args(torch)

    return cached_export(f"{name}-{SEEDING}", build)


def _image_args(size: int | tuple[int, int] = IMAGE):
    h, w = (size, size) if isinstance(size, int) else size
    return lambda torch: (torch.zeros(1, 3, h, w),)


def _photos(size: int = IMAGE) -> Callable[[], Samples]:
    def samples() -> Samples:
        cal, test = inputs.photo_views(size)
        return Samples([{"xs_0": inputs.imagenet(v)} for v in cal], [{"xs_0": inputs.imagenet(v)} for v in test])
    return samples


def _vision(name: str, half: str, kind: str, source: str, make, metric, floors, size=IMAGE) -> Entry:
    return Entry(name, half, kind, f"transformers {source} (seeded)",
                 lambda: _transformers(name, make, _image_args(size), _photos(size)), _photos(size), metric, floors)


def _text_samples(length: int, with_mask: bool) -> Samples:
    passages = inputs.text_passages()
    feeds = []
    for p in passages:
        ids, mask = inputs.byte_tokens(p, length)
        feeds.append({"xs_0": ids, "xs_1": mask} if with_mask else {"xs_0": ids})
    return Samples(feeds[::4], [f for i, f in enumerate(feeds) if i % 4])


def _speech_samples() -> Samples:
    chunks = inputs.speech_chunks(16000, 16000, 3)
    pieces = [{"xs_0": c[None]} for c in chunks] + [{"xs_0": c[None]} for c in inputs.speech_chunks(16000, 16000, 3, 8000)]
    return Samples(pieces[1:2] + pieces[4:5], pieces[0:1] + pieces[2:4] + pieces[5:])


YOLOS_SIZE = (256, 320)


def yolos_boxes(out: dict[str, np.ndarray], threshold: float = 0.3):
    """YOLOS's per-query class logits (last class: no object) and normalised (cx, cy, w, h) boxes -> the queries
    whose best object class passes `threshold`."""
    logits = next(v for v in out.values() if v.shape[-1] != 4)[0]
    boxes = next(v for v in out.values() if v.shape[-1] == 4)[0]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True))[:, :-1]
    keep = p.max(1) > threshold
    cx, cy, w, h = boxes[keep].T
    xyxy = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1) * np.array([YOLOS_SIZE[1], YOLOS_SIZE[0]] * 2)
    return xyxy, p.max(1)[keep], p.argmax(1)[keep]


def _yolos() -> Path:
    def build():
        import torch  # pyright: ignore[reportMissingImports]
        import transformers  # pyright: ignore[reportMissingImports]

        cfg = transformers.YolosConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                                       intermediate_size=768, image_size=list(YOLOS_SIZE), num_labels=4,
                                       num_detection_tokens=100)
        net = variance_preserving(transformers.YolosForObjectDetection(cfg)).eval()

        class Exported(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, pixel_values):
                out = self.net(pixel_values)
                return out[0], out[1]  # class logits, boxes

        return lsuv(Exported().eval(), _yolos_samples().calibration), (torch.zeros(1, 3, *YOLOS_SIZE),)

    return cached_export(f"yolos_tiny-{SEEDING}", build)


def _yolos_samples() -> Samples:
    from skimage.transform import resize

    cal, test = inputs.photo_views(320)
    x = lambda v: {"pixel_values": inputs.imagenet(resize(v, YOLOS_SIZE + (3,), anti_aliasing=True))}  # noqa: E731
    return Samples([x(v) for v in cal], [x(v) for v in test])


def _bert() -> Path:
    config = lambda tf: tf.BertConfig(vocab_size=512, hidden_size=256, num_hidden_layers=4,  # noqa: E731
                                      num_attention_heads=4, intermediate_size=1024)
    ids = lambda torch: (torch.zeros(1, 64, dtype=torch.int64), torch.ones(1, 64, dtype=torch.int64))  # noqa: E731
    return _transformers("hf_bert_mini", lambda tf: tf.BertModel(config(tf)), ids, lambda: _text_samples(64, True))


def _gpt2() -> Path:
    config = lambda tf: tf.GPT2Config(vocab_size=512, n_positions=128, n_embd=256, n_layer=4, n_head=4)  # noqa: E731
    return _transformers("hf_gpt2_mini", lambda tf: tf.GPT2LMHeadModel(config(tf)),
                         lambda torch: (torch.zeros(1, 64, dtype=torch.int64),), lambda: _text_samples(64, False))


def _wav2vec2() -> Path:
    config = lambda tf: tf.Wav2Vec2Config(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,  # noqa: E731
                                          intermediate_size=1024, conv_dim=(256,) * 7, num_conv_pos_embeddings=64)
    return _transformers("hf_wav2vec2_mini", lambda tf: tf.Wav2Vec2Model(config(tf)),
                         lambda torch: (torch.zeros(1, 16000),), _speech_samples)


def _gpt2_128() -> Path:
    """GPT-2's own vocabulary (50,257 tokens) and its tied LM head, 2 layers over a fixed sequence of 128 (issue
    40): the head holds most of the MACs."""
    config = lambda tf: tf.GPT2Config(n_embd=256, n_layer=2, n_head=4)  # noqa: E731
    return _transformers("hf_gpt2_2l_seq128", lambda tf: tf.GPT2LMHeadModel(config(tf)),
                         lambda torch: (torch.zeros(1, 128, dtype=torch.int64),), lambda: _text_samples(128, False))


WHISPER_SECONDS = 30
"""Whisper's encoder takes exactly 30 s of log-mel frames (3,000): the feature extractor pads the speech with
silence, as it does for every user."""


def _whisper_samples() -> Samples:
    """Log-mel features (1, 80, 3000) of windows of the real utterance (1 to 3.2 s, from several offsets),
    computed by transformers' WhisperFeatureExtractor with its default (whisper-tiny) settings: no download."""
    from transformers import WhisperFeatureExtractor  # pyright: ignore[reportMissingImports]

    extract = WhisperFeatureExtractor(chunk_length=WHISPER_SECONDS)
    rate = extract.sampling_rate
    speech = inputs.speech(rate)
    windows = [speech] + [speech[o:o + n] for o, n in ((0, rate), (rate // 2, 2 * rate), (rate, 2 * rate),
                                                           (rate // 4, rate + rate // 2), (3 * rate // 2, rate))]
    feeds = [{"xs_0": extract(w, sampling_rate=rate, return_tensors="np")["input_features"].astype(np.float32)}
             for w in windows]
    return Samples(feeds[1:3], feeds[:1] + feeds[3:])


def _whisper_encoder() -> Path:
    """Whisper-tiny's encoder (d_model 384, 4 layers, 6 heads, 2 Conv1d + GELU stem, 1,500 positions)."""
    config = lambda tf: tf.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,  # noqa: E731
                                         encoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=1500)
    return _transformers("hf_whisper_tiny_encoder", lambda tf: tf.WhisperModel(config(tf)).get_encoder(),
                         lambda torch: (torch.zeros(1, 80, 100 * WHISPER_SECONDS),), _whisper_samples)


def entries() -> list[Entry]:
    t = lambda name: (lambda tf: name(tf))  # noqa: E731
    return [
        _vision("hf_mobilenet_v2", "dev", "classifier", "MobileNetV2 1.0",
                t(lambda tf: tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config(num_labels=1000))),
                metrics.classifier(), CLASSIFIER),
        _vision("hf_efficientnet_b0", "heldout", "classifier", "EfficientNet-B0",
                t(lambda tf: tf.EfficientNetForImageClassification(tf.EfficientNetConfig(image_size=IMAGE))),
                metrics.classifier(), CLASSIFIER),
        _vision("hf_convnext_atto", "dev", "classifier", "ConvNeXt-atto",
                t(lambda tf: tf.ConvNextForImageClassification(tf.ConvNextConfig(
                    depths=[2, 2, 6, 2], hidden_sizes=[40, 80, 160, 320], num_labels=1000))),
                metrics.classifier(), CLASSIFIER),
        _vision("hf_regnety_400mf", "heldout", "classifier", "RegNetY-400MF",
                t(lambda tf: tf.RegNetForImageClassification(tf.RegNetConfig(
                    embedding_size=32, hidden_sizes=[48, 104, 208, 440], depths=[1, 3, 6, 6], groups_width=8,
                    layer_type="y", num_labels=1000))),
                metrics.classifier(), CLASSIFIER),
        _vision("hf_deit_tiny", "dev", "classifier", "ViT/DeiT-tiny",
                t(lambda tf: tf.ViTForImageClassification(tf.ViTConfig(
                    hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                    image_size=IMAGE, patch_size=16, num_labels=1000))),
                metrics.classifier(), CLASSIFIER),
        _vision("hf_mobilevit_xxs", "heldout", "classifier", "MobileViT-XXS",
                t(lambda tf: tf.MobileViTForImageClassification(tf.MobileViTConfig(
                    hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], expand_ratio=2.0,
                    image_size=256, num_labels=1000))),
                metrics.classifier(), CLASSIFIER, size=256),
        _vision("hf_segformer_b0", "dev", "segmentation", "SegFormer-B0",
                t(lambda tf: tf.SegformerForSemanticSegmentation(tf.SegformerConfig(num_labels=19))),
                metrics.mask_iou(), MAP, size=256),
        _vision("hf_mobilevit_deeplab", "heldout", "segmentation", "MobileViT-XXS + DeepLabV3 head",
                t(lambda tf: tf.MobileViTForSemanticSegmentation(tf.MobileViTConfig(
                    hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], expand_ratio=2.0,
                    aspp_out_channels=128, image_size=256, num_labels=21))),
                metrics.mask_iou(), MAP, size=256),
        Entry("yolos_tiny", "heldout", "detector", "transformers YOLOS-tiny (seeded, 4 classes)", _yolos,
              _yolos_samples, metrics.detections(yolos_boxes), DETECTOR),
        Entry("hf_bert_mini", "dev", "encoder", "transformers BERT, 4 layers x 256, attention mask (seeded)",
              _bert, lambda: _text_samples(64, True), metrics.embedding(), EMBEDDING),
        Entry("hf_gpt2_mini", "heldout", "decoder", "transformers GPT-2, 4 layers x 256, byte vocabulary (seeded)",
              _gpt2, lambda: _text_samples(64, False), metrics.classifier(), CLASSIFIER),
        Entry("hf_wav2vec2_mini", "heldout", "embedding", "transformers Wav2Vec2: 7 1-D convs + 4 layers (seeded)",
              _wav2vec2, _speech_samples, metrics.embedding(), EMBEDDING),
        # issue 40's transformers, all HELD-OUT (the compiler's transformer work is developed on hf_deit_tiny
        # and hf_bert_mini only)
        _vision("hf_deit_tiny_distilled", "heldout", "classifier", "DeiT-tiny distilled (class + distillation token)",
                t(lambda tf: tf.DeiTForImageClassificationWithTeacher(tf.DeiTConfig(
                    hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                    image_size=IMAGE, patch_size=16, num_labels=1000))),
                metrics.classifier(), CLASSIFIER),
        Entry("hf_gpt2_2l_seq128", "heldout", "decoder",
              "transformers GPT-2, 2 layers x 256, sequence 128, 50,257-token tied LM head (seeded)",
              _gpt2_128, lambda: _text_samples(128, False), metrics.classifier(), CLASSIFIER),
        Entry("hf_whisper_tiny_encoder", "heldout", "encoder",
              "transformers Whisper-tiny encoder: 2 Conv1d + 4 layers x 384, 30 s log-mel (seeded)",
              _whisper_encoder, _whisper_samples, metrics.embedding(), EMBEDDING),
    ]
