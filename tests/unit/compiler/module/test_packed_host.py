"""A host activation between two accelerator layers runs on the packed tile: one crossing per segment."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import vtakit
from vtakit.compiler.module.packed_host import packed_nodes

RNG = np.random.default_rng(4)


def _net(last_activation_is_output: bool = False) -> onnx.ModelProto:
    """conv -> HardSwish -> conv -> SiLU (x * sigmoid(x)) -> conv: the activations the ALU cannot do."""
    def conv(i: str, o: str, w: str):
        return helper.make_node("Conv", [i, w], [o], name=o, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    nodes = [conv("x", "c0", "w0"), helper.make_node("HardSwish", ["c0"], ["a0"]), conv("a0", "c1", "w1"),
             helper.make_node("Sigmoid", ["c1"], ["s1"]), helper.make_node("Mul", ["c1", "s1"], ["a1"])]
    outputs = ["a1"]
    if not last_activation_is_output:
        nodes.append(conv("a1", "y", "w2"))
        outputs = ["y"]
    inits = [numpy_helper.from_array((RNG.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32), f"w{i}")
             for i in range(3)]
    g = helper.make_graph(nodes, "activations", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 16, 8, 8]) for o in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_each_host_segment_costs_one_crossing_and_the_bits_are_the_same():
    cal = [RNG.standard_normal((1, 16, 8, 8)).astype(np.float32) for _ in range(4)]
    module = vtakit.compile(_net(), "pynq", calibrate=cal)
    assert len(module.vta_tasks()) == 3
    on_tiles = packed_nodes(module.graph, module.tasks)
    assert {"HardSwish", "Sigmoid", "Mul", "Dequantize", "Quantize"} <= {module.graph.node(n).op for n in on_tiles}
    x = cal[0]
    got = module.run(x, device="sim")["y"]
    run = module.last_run
    # the input's quantization, the two activations, the output's dequantization: one crossing each
    assert run.host_segments == 4 and run.border_transfers == 4
    assert np.array_equal(got, module.run(x, device="cpu")["y"])
    assert np.array_equal(got, module.run(x, device="fsim")["y"])


def test_an_activation_read_as_a_graph_output_is_unpacked():
    cal = [RNG.standard_normal((1, 16, 8, 8)).astype(np.float32) for _ in range(4)]
    module = vtakit.compile(_net(last_activation_is_output=True), "pynq", calibrate=cal)
    on_tiles = packed_nodes(module.graph, module.tasks)
    assert "HardSwish_1" in on_tiles and not {"Sigmoid_3", "Mul_4"} & set(on_tiles)
    x = cal[0]
    assert np.array_equal(module.run(x, device="sim")["a1"], module.run(x, device="cpu")["a1"])
