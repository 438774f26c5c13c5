"""The precision rule on random small graphs (issue 22): accelerator ops (Conv, Relu, Gemm, Add,
MaxPool), float host ops (Softmax, AveragePool, GlobalAveragePool, Mul) and precision-neutral
ops (Identity, Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Dropout, Concat, Pad), with
branches and several outputs.  On every such graph, after quantization:

- no Quantize -> Dequantize round trip: a Dequantize never reads, through int8 precision-neutral
  ops, a value a Quantize made (it would sit between two float ops);
- a tensor is quantized only for an int8 compute op: every path from a Quantize through int8
  precision-neutral ops ends in a QConv, QDense or QAdd;
- a graph output that reaches, through precision-neutral ops, only float ops or graph inputs is
  float, never a Dequantize's result.

The graphs and checks: tests/support/precision_graphs.py; 300 graphs instead of 25:
tests/integration/compiler/quant/test_precision_property.py.
"""

from __future__ import annotations

from hypothesis import given, settings

from tests.support.precision_graphs import RandomNet, check_precision_rule, networks


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(model=networks())
def test_precision_rule_on_random_graphs(model):
    check_precision_rule(model)


def test_the_checks_catch_the_old_round_trip():
    """Softmax -> Transpose -> output: the graph the issue's fix is about, as a fixed example."""
    net = RandomNet()
    t = net.grow("Gemm", net.grow("Flatten", net.grow("Conv", "x", None), None), None)
    check_precision_rule(net.model([net.grow("Transpose", net.grow("Softmax", t, None), None)]))
