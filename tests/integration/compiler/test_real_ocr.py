"""Real pretrained OCR networks in int8.  PP-OCRv4's text detector (DBNet) from RapidOCR's wheel, calibrated on rendered
pages and run on views of scikit-image's `page` scan against float onnxruntime.  Its depthwise convs read
tensors the host quantizes (a hardswish and a learned affine run there), whose channel maxima spread
over 2**6, and so do most of its dense convs: the case compiler/quant/techniques/channel_fill.py is for.  Its recognizer (PP-LCNetV3 + SVTR) on text strips:
most of its convs keep int32 results for the host, with per-channel weight exponents.  Skips with the reason when the wheel is
absent (tests/support/real_models.py says how to get it)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import documents, real_models

SIZE = 320
# Floors under what benchmarks/ocr_real.py measures with the defaults (pynq): mean map cosine 0.894, mean
# text-pixel IoU 0.798 on the 8 views (without the channel fill 0.753 / 0.589).
COSINE_FLOOR, IOU_FLOOR = 0.87, 0.77
# The recognizer on 8 text strips (`ocr_real.py --model rec`): mean softmax cosine 0.968, most likely
# character as float's on 97.5 % of the timesteps (0.783 / 78 % before its int32-output convs had
# per-channel weight exponents).
REC_COSINE_FLOOR, REC_AGREE_FLOOR = 0.94, 0.93


@pytest.mark.slow
def test_text_detector_int8_follows_float_and_the_cycle_model_agrees():
    import onnxruntime as ort

    from vtakit.compiler.pipeline import compile_module

    try:
        model = real_models.ppocr_det_model(SIZE)
    except real_models.ModelMissing as e:
        pytest.skip(str(e))
    cal = [real_models.ppocr_preprocess(p)[None] for p in documents.calibration_pages(8, SIZE)]
    module = compile_module(model, "pynq", calibrate=cal)
    filled = module.notes.calibration.channel_fill.bits
    assert len(filled) >= 30  # 13 of its 14 depthwise convs and most dense ones read a host-quantized tensor
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    cosines, ious = [], []
    for i, (_, rgb) in enumerate(documents.test_scans(SIZE)):
        x = real_models.ppocr_preprocess(rgb)[None]
        got = module.run(x, device="cpu")["sigmoid_0.tmp_0"]
        if i == 0:
            np.testing.assert_array_equal(module.run(x, device="sim")["sigmoid_0.tmp_0"], got)
        cos, iou = documents.map_agreement(session.run(None, {"x": x})[0], got)
        cosines.append(cos)
        ious.append(iou)
    assert np.mean(cosines) >= COSINE_FLOOR
    assert np.mean(ious) >= IOU_FLOOR


@pytest.mark.slow
def test_text_recognizer_int8_reads_like_float_and_the_cycle_model_agrees():
    import onnxruntime as ort

    from vtakit.compiler.pipeline import compile_module

    height, width = 48, 320
    try:
        model = real_models.ppocr_model("rec", height, width)
    except real_models.ModelMissing as e:
        pytest.skip(str(e))
    pages = documents.calibration_pages(8, 320)
    cal = [real_models.ppocr_preprocess(s, "rec")[None] for s in documents.text_strips(pages, 1, 0, height, width)]
    module = compile_module(model, "pynq", calibrate=cal)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    strips = [s for _, v in documents.test_scans(320) for s in documents.text_strips([v], 1, 1, height, width)]
    cosines, agree = [], []
    for i, strip in enumerate(strips):
        x = real_models.ppocr_preprocess(strip, "rec")[None]
        got = np.asarray(next(iter(module.run(x, device="cpu").values())))
        if i == 0:
            np.testing.assert_array_equal(np.asarray(next(iter(module.run(x, device="sim").values()))), got)
        ref = session.run(None, {name: x})[0]
        r, g = ref.reshape(-1, ref.shape[-1]).astype(np.float64), got.reshape(-1, ref.shape[-1])
        cosines.append(float(np.sum(r * g) / (np.linalg.norm(r) * np.linalg.norm(g))))
        agree.append(float(np.mean(r.argmax(1) == g.argmax(1))))
    assert np.mean(cosines) >= REC_COSINE_FLOOR
    assert np.mean(agree) >= REC_AGREE_FLOOR
