"""A real pretrained text detector in int8: PP-OCRv4's DBNet from RapidOCR's wheel, calibrated on rendered
pages and run on views of scikit-image's `page` scan against float onnxruntime.  Its depthwise convs read
tensors the host quantizes (a hardswish and a learned affine run there), whose channel maxima spread
over 2**6, and so do most of its dense convs: the case compiler/graph/channel_fill.py is for.  Skips with the reason when the wheel is
absent (tests/support/real_models.py says how to get it)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import documents, real_models

SIZE = 320
# Floors under what benchmarks/ocr_real.py measures with the defaults (pynq): mean map cosine 0.913, mean
# text-pixel IoU 0.824 on the 8 views (without the channel fill 0.753 / 0.589).
COSINE_FLOOR, IOU_FLOOR = 0.89, 0.79


@pytest.mark.slow
def test_text_detector_int8_follows_float_and_the_cycle_model_agrees():
    import onnxruntime as ort

    from vtakit.compiler.graph import compile_module

    try:
        model = real_models.ppocr_det_model(SIZE)
    except real_models.ModelMissing as e:
        pytest.skip(str(e))
    cal = [real_models.ppocr_preprocess(p)[None] for p in documents.calibration_pages(8, SIZE)]
    module = compile_module(model, "pynq", calibrate=cal)
    filled = module.notes["calibration"]["channel_fill"]["bits"]
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
