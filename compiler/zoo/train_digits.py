"""Train digits_cnn on scikit-learn's digits in pure numpy and commit it as ONNX.

    .venv/bin/python -m vtakit.compiler.zoo.train_digits

Pure numpy (im2col convolutions with hand-written backward passes, Adam) so the
model can be rebuilt anywhere without a deep-learning framework, and seeded so a
rerun writes the same bytes.  Writes digits_cnn.onnx and digits_cnn.json next
to this file.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnx

from .digits import (
    MODEL_PATH,
    NUM_CLASSES,
    PREPROCESSING,
    SPLIT,
    digits_data,
    export_digits_cnn,
)
from .numpy_ops import im2col
from vtakit.isa.arith import ceil_div

SEED = 0
EPOCHS = 20
BATCH = 32
LEARNING_RATE = 2e-3
SAME_3X3 = (1, 1, 1, 1)
CONV_SHAPES = {"conv1": (16, 1, 3, 3), "conv2": (32, 16, 3, 3), "conv3": (32, 32, 3, 3)}
FC_INPUTS = 32 * 4 * 4


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """He-normal weights, zero biases."""
    params: dict[str, np.ndarray] = {}
    for name, shape in CONV_SHAPES.items():
        fan_in = shape[1] * shape[2] * shape[3]
        params[f"{name}.weight"] = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2 / fan_in))
        params[f"{name}.bias"] = np.zeros(shape[0], dtype=np.float32)
    params["fc.weight"] = rng.standard_normal((NUM_CLASSES, FC_INPUTS), dtype=np.float32) * np.float32(np.sqrt(2 / FC_INPUTS))
    params["fc.bias"] = np.zeros(NUM_CLASSES, dtype=np.float32)
    return params


def conv_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """3x3 'same' convolution as one matmul; returns the output and the im2col rows for backward."""
    cols = im2col(x, (3, 3), 1, SAME_3X3)
    n, _, h, w = x.shape
    y = cols @ weight.reshape(weight.shape[0], -1).T + bias
    return y.reshape(n, h, w, -1).transpose(0, 3, 1, 2), cols


def conv_backward(dy: np.ndarray, cols: np.ndarray, weight: np.ndarray,
                  x_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (dx, dweight, dbias); dx scatters the im2col rows back (col2im)."""
    n, c, h, w = x_shape
    out_ch = weight.shape[0]
    dy_rows = dy.transpose(0, 2, 3, 1).reshape(-1, out_ch)
    dweight = (dy_rows.T @ cols).reshape(weight.shape)
    dbias = dy_rows.sum(axis=0)
    dcols = (dy_rows @ weight.reshape(out_ch, -1)).reshape(n, h, w, c, 3, 3)
    dx_padded = np.zeros((n, c, h + 2, w + 2), dtype=np.float32)
    for i in range(3):
        for j in range(3):
            dx_padded[:, :, i:i + h, j:j + w] += dcols[..., i, j].transpose(0, 3, 1, 2)
    return dx_padded[:, :, 1:-1, 1:-1], dweight, dbias


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, dict]:
    """Logits and everything backward needs."""
    cache: dict = {}
    h = x
    for name in ("conv1", "conv2", "conv3"):
        cache[f"{name}.in_shape"] = h.shape
        h, cache[f"{name}.cols"] = conv_forward(h, params[f"{name}.weight"], params[f"{name}.bias"])
        h = np.maximum(h, 0.0)
        cache[f"{name}.out"] = h
        if name == "conv2":                                     # 2x2 max-pool, stride 2
            n, c, hh, ww = h.shape
            blocks = h.reshape(n, c, hh // 2, 2, ww // 2, 2)
            h = blocks.max(axis=(3, 5))
            winners = blocks == h[:, :, :, None, :, None]
            cache["pool.route"] = (winners / winners.sum(axis=(3, 5), keepdims=True)).astype(np.float32)
    flat = h.reshape(h.shape[0], -1)
    cache["flat"] = flat
    return flat @ params["fc.weight"].T + params["fc.bias"], cache


def backward(params: dict[str, np.ndarray], cache: dict, dlogits: np.ndarray) -> dict[str, np.ndarray]:
    grads = {"fc.weight": dlogits.T @ cache["flat"], "fc.bias": dlogits.sum(axis=0)}
    dh = (dlogits @ params["fc.weight"]).reshape(cache["conv3.out"].shape)
    for name in ("conv3", "conv2", "conv1"):
        if name == "conv2":                                     # undo the pool: route to the max
            route = cache["pool.route"]
            dh = (route * dh[:, :, :, None, :, None]).reshape(cache["conv2.out"].shape)
        dh = dh * (cache[f"{name}.out"] > 0)
        dh, grads[f"{name}.weight"], grads[f"{name}.bias"] = conv_backward(
            dh, cache[f"{name}.cols"], params[f"{name}.weight"], cache[f"{name}.in_shape"])
    return grads


def predict(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return forward(params, x)[0].argmax(axis=1)


def train(x: np.ndarray, y: np.ndarray, *, seed: int = SEED, epochs: int = EPOCHS) -> dict[str, np.ndarray]:
    """Adam on softmax cross-entropy, cosine learning-rate decay, reshuffled every epoch."""
    rng = np.random.default_rng(seed)
    params = init_params(rng)
    moment1 = {k: np.zeros_like(v) for k, v in params.items()}
    moment2 = {k: np.zeros_like(v) for k, v in params.items()}
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    steps_per_epoch = ceil_div(len(x), BATCH)
    step = 0
    for epoch in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), BATCH):
            idx = order[start:start + BATCH]
            logits, cache = forward(params, x[idx])
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            probs[np.arange(len(idx)), y[idx]] -= 1.0
            grads = backward(params, cache, (probs / len(idx)).astype(np.float32))
            step += 1
            progress = step / (epochs * steps_per_epoch)
            lr = np.float32(LEARNING_RATE * 0.5 * (1.0 + np.cos(np.pi * progress)))
            for k in params:
                moment1[k] = beta1 * moment1[k] + (1 - beta1) * grads[k]
                moment2[k] = beta2 * moment2[k] + (1 - beta2) * grads[k] ** 2
                m_hat = moment1[k] / (1 - beta1 ** step)
                v_hat = moment2[k] / (1 - beta2 ** step)
                params[k] = (params[k] - lr * m_hat / (np.sqrt(v_hat) + eps)).astype(np.float32)
        accuracy = float((predict(params, x) == y).mean())
        print(f"epoch {epoch + 1:2d}/{epochs}: train accuracy {accuracy:.4f}")
    return params


def _onnxruntime_predictions(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray | None:
    try:
        import onnxruntime as ort  # lazy: onnxruntime (the dev extra)
    except ImportError:
        return None
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"data": x})[0].argmax(axis=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=MODEL_PATH, help="ONNX path (the .json goes beside it)")
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = digits_data()
    started = time.perf_counter()
    params = train(x_train, y_train, seed=args.seed, epochs=args.epochs)
    seconds = time.perf_counter() - started
    train_accuracy = float((predict(params, x_train) == y_train).mean())
    test_predictions = predict(params, x_test)
    test_correct = int((test_predictions == y_test).sum())

    model, builder_logits = export_digits_cnn(params, x_test)
    onnx.checker.check_model(model, full_check=True)
    # The exported graph must compute what was trained: the builder's own numpy trace of
    # it, and onnxruntime where installed, must agree with the trainer on every test image.
    if not np.array_equal(builder_logits.argmax(axis=1), test_predictions):
        raise SystemExit("exported graph's numpy trace disagrees with the trained network")
    ort_predictions = _onnxruntime_predictions(model, x_test)
    if ort_predictions is not None and not np.array_equal(ort_predictions, test_predictions):
        raise SystemExit("onnxruntime disagrees with the trained network on the test set")

    record = {
        "test_accuracy": test_correct / len(y_test), "train_accuracy": train_accuracy,
        "test_correct": test_correct, "n_test": len(y_test), "n_train": len(y_train),
        "seed": args.seed, "split": SPLIT, "epochs": args.epochs, "preprocessing": PREPROCESSING,
        "optimizer": f"Adam lr {LEARNING_RATE} cosine decay, batch {BATCH}, softmax cross-entropy",
        "architecture": "Conv3x3 1->16 +Relu, Conv3x3 16->32 +Relu, MaxPool 2x2, "
                        "Conv3x3 32->32 +Relu, Flatten, Gemm 512->10",
        "input": "data (N, 1, 8, 8) float32", "output": "logits (N, 10)",
    }
    onnx.save(model, str(args.out))
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"trained in {seconds:.1f} s: train accuracy {train_accuracy:.4f}, "
          f"test accuracy {record['test_accuracy']:.4f} ({test_correct}/{len(y_test)})")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) and {args.out.with_suffix('.json').name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
