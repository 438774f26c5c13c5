"""Attention's products (two activations multiplied, batched over heads) on the accelerator, one product
per head with the head's own int8 scales, bit-identical on the cpu, the functional and the cycle model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import vtakit
from vtakit.compiler.frontend.onnx_import import import_onnx
from vtakit.compiler.module.compiled import CompiledModule
from vtakit.compiler.module.macs import module_macs
from vtakit.compiler.ops.execute import run_graph
from vtakit.compiler.passes.head_products import split_head_products

HEADS, TOKENS, DIM = 2, 64, 32  # 64 x 32 x 64: a slice at head_products.MIN_SLICE_MACS
SHAPE = [1, HEADS, TOKENS, DIM]


def _attention(shape=SHAPE) -> onnx.ModelProto:
    """softmax(q @ k^T) @ v over two heads, q, k and v graph inputs."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="av")]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"]
    g = helper.make_graph(nodes, "attention", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(rng, head_scales=(0.3, 1.2)) -> dict[str, np.ndarray]:
    """q and k of different ranges per head (what per-head scales are for)."""
    per_head = np.asarray(head_scales, np.float32).reshape(1, HEADS, 1, 1)
    return {n: (rng.standard_normal(SHAPE) * (per_head if n != "v" else 1)).astype(np.float32) for n in "qkv"}


def _reference(f: dict[str, np.ndarray]) -> np.ndarray:
    s = f["q"] @ f["k"].transpose(0, 1, 3, 2)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ f["v"]


def test_a_batched_product_of_activations_becomes_one_act_dense_per_head():
    g = split_head_products(import_onnx(_attention()))
    products = [n for n in g.nodes if n.op == "ActDense"]
    assert [n.name for n in products] == ["qk.head0", "qk.head1", "av.head0", "av.head1"]
    assert g.tensors[products[0].outputs[0]].shape == (TOKENS, TOKENS)
    assert g.tensors[products[2].inputs[1]].shape == (DIM, TOKENS)  # v^T of one head: the weights' (N, K)
    f = _feeds(np.random.default_rng(2))
    np.testing.assert_allclose(run_graph(g, f)["y"], _reference(f), rtol=1e-4, atol=1e-5)


def test_attention_products_run_on_the_accelerator_with_a_scale_per_head(tmp_path):
    rng = np.random.default_rng(4)
    module = vtakit.compile(_attention(), "pynq", calibrate=[_feeds(rng) for _ in range(4)])
    assert sorted(t.node for t in module.vta_tasks()) == ["av.head0", "av.head1", "qk.head0", "qk.head1"]
    assert module_macs(module).accelerator_share == 1.0
    q = {n.name: n for n in module.graph.nodes}
    exps = [module.graph.tensors[q[f"qk.head{h}"].inputs[0]].exp for h in range(HEADS)]
    assert exps[0] > exps[1]  # head 0's q is four times smaller: a finer grid
    scores = module.graph.tensors[q["qk.head0"].outputs[0]]
    assert scores.dtype == "int8"  # rows of tokens leave in int8 (precision._token_rows), not as int32 planes
    f = _feeds(rng)
    outs = {d: module.run(f, device=d)["y"] for d in ("cpu", "fsim", "sim")}
    assert all(np.array_equal(outs["cpu"], y) for y in outs.values())
    loaded = CompiledModule.load(module.save(tmp_path / "attention.vtamod"))  # weight-layout buffers checked
    assert np.array_equal(loaded.run(f, device="fsim")["y"], outs["cpu"])
    y, ref = outs["sim"].ravel(), _reference(f).ravel()
    assert float(y @ ref / np.linalg.norm(y) / np.linalg.norm(ref)) > 0.99


def test_small_products_stay_in_the_hosts_matmul():
    """A 7x7 window's head (49 x 32 x 49 MACs) costs the accelerator more in fixed costs than it computes."""
    g = split_head_products(import_onnx(_attention([1, 3, 49, 32])))
    assert [n.op for n in g.nodes].count("MatMul") == 2 and "ActDense" not in {n.op for n in g.nodes}
