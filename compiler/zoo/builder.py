"""GraphBuilder: ONNX graphs from code, with seeded weights and a calibration trace.

Every method adds one node (plus its initializers) and, at the same time,
evaluates it in numpy on a small batch of seeded standard-normal inputs.  That
trace is what makes the random weights give a sane network: a BatchNormalization
takes its running mean/var from the statistics of the tensor it actually
receives (a data-dependent init, in the spirit of LSUV), so activations stay
O(1) however deep the network is, and a classifier can be centred so its logits
depend on the input rather than on a common-mode offset.

The calibration inputs come from their own generator, so the weights depend on
`seed` only, never on the batch size or opset a model is emitted for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import numpy_ops as ops
from vtakit.errors import ZooError

MIN_OPSET = 11
MAX_OPSET = 21
BN_EPSILON = 1e-5
CALIBRATION_BATCH = 4

Dim = int | str


def check_opset(opset: int) -> int:
    """The ops the zoo emits keep the same meaning from opset 11 (Clip/Pad take inputs) to 21."""
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ZooError(f"opset must be an int in {MIN_OPSET}..{MAX_OPSET}, got {opset!r}")
    return opset


class GraphBuilder:
    """Collects nodes, initializers and a numpy trace of one network."""

    def __init__(self, graph_name: str, *, seed: int, opset: int,
                 calibration_batch: int = CALIBRATION_BATCH) -> None:
        self.graph_name = graph_name
        self.seed = seed
        self.opset = check_opset(opset)
        self.rng = np.random.default_rng(seed)                 # weights, in node order
        self._calibration_rng = np.random.default_rng([seed, 0xCA1B])
        self._calibration_batch = calibration_batch
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: dict[str, onnx.TensorProto] = {}
        self._inputs: list[onnx.ValueInfoProto] = []
        self._batch_dim: Dim = 1
        self.values: dict[str, np.ndarray] = {}                # tensor name -> calibration value

    # -- plumbing -------------------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[Dim], calibration: np.ndarray | None = None) -> str:
        """Declare a float input; its calibration value defaults to standard normal noise."""
        self._batch_dim = shape[0]
        self._inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        if calibration is None:
            calibration = self._calibration_rng.standard_normal(
                (self._calibration_batch, *shape[1:]), dtype=np.float32)
        self.values[name] = np.asarray(calibration, dtype=np.float32)
        return name

    def constant(self, name: str, value: np.ndarray) -> str:
        """An initializer; names are unique, re-adding the same name must not change it."""
        if name in self._initializers:
            existing = numpy_helper.to_array(self._initializers[name])
            if not np.array_equal(existing, value):
                raise ZooError(f"initializer {name!r} defined twice with different values")
            return name
        self._initializers[name] = numpy_helper.from_array(np.asarray(value), name)
        return name

    def _node(self, op: str, inputs: Sequence[str], name: str, out: str | None,
              value: np.ndarray, **attrs) -> str:
        out = out or name
        if out in self.values:
            raise ZooError(f"tensor {out!r} produced twice")
        self._nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        self.values[out] = value
        return out

    def channels(self, x: str) -> int:
        return self.values[x].shape[1]

    def he_normal(self, shape: Sequence[int], fan_in: int) -> np.ndarray:
        """He et al. (2015): variance 2/fan_in keeps ReLU activations' scale layer to layer."""
        std = np.float32(np.sqrt(2.0 / fan_in))
        return self.rng.standard_normal(tuple(shape), dtype=np.float32) * std

    # -- layers ---------------------------------------------------------------------------------

    def conv(self, x: str, out_channels: int, kernel: int, *, name: str, stride: int = 1,
             pad: int = 0, group: int = 1, bias: bool = False, out: str | None = None,
             weight: np.ndarray | None = None, bias_value: np.ndarray | None = None) -> str:
        """Conv with He-normal weights (or given ones); a bias only where no BN follows."""
        in_channels = self.channels(x)
        shape = (out_channels, in_channels // group, kernel, kernel)
        if weight is None:
            weight = self.he_normal(shape, fan_in=shape[1] * kernel * kernel)
        if weight.shape != shape:
            raise ZooError(f"{name}: weight shape {weight.shape} != {shape}")
        inputs = [x, self.constant(f"{name}.weight", weight.astype(np.float32))]
        b = None
        if bias or bias_value is not None:
            b = (self.rng.standard_normal(out_channels, dtype=np.float32) * 0.01
                 if bias_value is None else np.asarray(bias_value, dtype=np.float32))
            inputs.append(self.constant(f"{name}.bias", b))
        pads = [pad] * 4
        value = ops.conv2d(self.values[x], weight, b, stride=stride, pads=pads, group=group)
        return self._node("Conv", inputs, name, out, value, kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=pads, group=group)

    def batch_norm(self, x: str, *, name: str, gamma: float = 1.0, out: str | None = None) -> str:
        """BN whose running stats are its input's calibration statistics (so it outputs
        zero mean and standard deviation `gamma` per channel on the calibration batch)."""
        v = self.values[x].astype(np.float64)
        axes = (0,) + tuple(range(2, v.ndim))
        mean = v.mean(axis=axes).astype(np.float32)
        var = np.maximum(v.var(axis=axes), 1e-6).astype(np.float32)
        scale = np.full(mean.shape, gamma, dtype=np.float32)
        beta = np.zeros(mean.shape, dtype=np.float32)
        params = {"scale": scale, "bias": beta, "mean": mean, "var": var}
        inputs = [x] + [self.constant(f"{name}.{k}", p) for k, p in params.items()]
        value = ops.batch_norm(self.values[x], scale, beta, mean, var, BN_EPSILON)
        return self._node("BatchNormalization", inputs, name, out, value, epsilon=BN_EPSILON)

    def relu(self, x: str, *, name: str, out: str | None = None) -> str:
        return self._node("Relu", [x], name, out, np.maximum(self.values[x], 0.0))

    def clip(self, x: str, low: float, high: float, *, name: str, out: str | None = None) -> str:
        """Clip with min/max as inputs (opset >= 11); the bounds are shared initializers."""
        lo = self.constant(f"clip.min.{low:g}", np.array(low, dtype=np.float32))
        hi = self.constant(f"clip.max.{high:g}", np.array(high, dtype=np.float32))
        return self._node("Clip", [x, lo, hi], name, out, np.clip(self.values[x], low, high))

    def max_pool(self, x: str, kernel: int, stride: int, *, name: str, pad: int = 0,
                 out: str | None = None) -> str:
        pads = [pad] * 4
        value = ops.max_pool(self.values[x], kernel, stride, pads)
        return self._node("MaxPool", [x], name, out, value, kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=pads)

    def avg_pool(self, x: str, kernel: int, stride: int, *, name: str, out: str | None = None) -> str:
        value = ops.avg_pool(self.values[x], kernel, stride)
        return self._node("AveragePool", [x], name, out, value, kernel_shape=[kernel, kernel],
                          strides=[stride, stride])

    def global_avg_pool(self, x: str, *, name: str, out: str | None = None) -> str:
        value = self.values[x].mean(axis=(2, 3), keepdims=True, dtype=np.float32)
        return self._node("GlobalAveragePool", [x], name, out, value)

    def flatten(self, x: str, *, name: str, out: str | None = None) -> str:
        v = self.values[x]
        return self._node("Flatten", [x], name, out, v.reshape(v.shape[0], -1), axis=1)

    def gemm(self, x: str, out_features: int, *, name: str, center: bool = False,
             out: str | None = None, weight: np.ndarray | None = None,
             bias_value: np.ndarray | None = None) -> str:
        """Fully connected layer, weight stored (out, in) with transB=1 as PyTorch exports it.

        `center` sets the bias to minus the mean output on the calibration batch and scales
        the weights so the outputs have unit standard deviation there.  Noise inputs all
        reach the classifier with nearly the same pooled features, so without it the
        logits would be one common vector plus a small input-dependent part.
        """
        v = self.values[x]
        if weight is None:
            weight = self.he_normal((out_features, v.shape[1]), fan_in=v.shape[1])
        product = v @ weight.T
        if bias_value is not None:
            bias = np.asarray(bias_value, dtype=np.float32)
        elif center:
            centred = product.astype(np.float64) - product.astype(np.float64).mean(axis=0)
            gain = np.float32(1.0 / max(float(centred.std()), 1e-6))
            weight, product = weight * gain, product * gain
            bias = (-product.astype(np.float64).mean(axis=0)).astype(np.float32)
        else:
            bias = self.rng.standard_normal(out_features, dtype=np.float32) * 0.01
        inputs = [x, self.constant(f"{name}.weight", weight.astype(np.float32)),
                  self.constant(f"{name}.bias", bias)]
        value = (product + bias).astype(np.float32)
        return self._node("Gemm", inputs, name, out, value, alpha=1.0, beta=1.0, transB=1)

    def add(self, a: str, b: str, *, name: str, out: str | None = None) -> str:
        return self._node("Add", [a, b], name, out, self.values[a] + self.values[b])

    def mul(self, x: str, factor: np.ndarray, *, name: str, out: str | None = None) -> str:
        """Multiply by a constant that broadcasts against x (e.g. shape (1, C, 1, 1))."""
        factor = np.asarray(factor, dtype=np.float32)
        inputs = [x, self.constant(f"{name}.factor", factor)]
        return self._node("Mul", inputs, name, out, self.values[x] * factor)

    def concat(self, xs: Sequence[str], *, axis: int, name: str, out: str | None = None) -> str:
        value = np.concatenate([self.values[x] for x in xs], axis=axis)
        return self._node("Concat", list(xs), name, out, value, axis=axis)

    def pad(self, x: str, pads: Sequence[int], *, name: str, out: str | None = None) -> str:
        """Zero padding of H and W; `pads` is (top, left, bottom, right)."""
        top, left, bottom, right = pads
        onnx_pads = np.array([0, 0, top, left, 0, 0, bottom, right], dtype=np.int64)
        inputs = [x, self.constant(f"{name}.pads", onnx_pads)]
        value = ops.pad_spatial(self.values[x], pads)
        return self._node("Pad", inputs, name, out, value, mode="constant")

    def reshape(self, x: str, shape: Sequence[int], *, name: str, out: str | None = None) -> str:
        """Reshape to a constant shape tensor (0 keeps a dimension, -1 infers one)."""
        inputs = [x, self.constant(f"{name}.shape", np.array(shape, dtype=np.int64))]
        return self._node("Reshape", inputs, name, out, ops.reshape(self.values[x], shape))

    def transpose(self, x: str, perm: Sequence[int], *, name: str, out: str | None = None) -> str:
        value = np.ascontiguousarray(self.values[x].transpose(perm))
        return self._node("Transpose", [x], name, out, value, perm=list(perm))

    def softmax(self, x: str, *, name: str, axis: int = 1, out: str | None = None) -> str:
        """Softmax on a 2-D tensor along axis 1: the same meaning before and after opset 13."""
        if self.values[x].ndim != 2:
            raise ZooError("softmax is only emitted on 2-D tensors (its semantics changed at opset 13)")
        return self._node("Softmax", [x], name, out, ops.softmax(self.values[x], axis), axis=axis)

    # -- result ---------------------------------------------------------------------------------

    def model(self, outputs: Sequence[str], *, doc: str = "",
              metadata: dict[str, str] | None = None) -> onnx.ModelProto:
        """The finished model; graph outputs take the input's batch dimension."""
        out_infos = [helper.make_tensor_value_info(
            name, TensorProto.FLOAT, [self._batch_dim, *self.values[name].shape[1:]])
            for name in outputs]
        graph = helper.make_graph(self._nodes, self.graph_name, self._inputs, out_infos,
                                  initializer=list(self._initializers.values()), doc_string=doc)
        opset_ids = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opset_ids, producer_name="vtakit.compiler.zoo",
                                  ir_version=helper.find_min_ir_version_for(opset_ids))
        meta = {"seed": str(self.seed), **(metadata or {})}
        helper.set_model_props(model, meta)
        return model


class PretrainedGraph:
    """Nodes and initializers of an image classifier whose weights come from a file (the real-weights
    loaders): unlike GraphBuilder it keeps no numpy trace, which would run the whole network in numpy."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        """A float32 initializer."""
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value, np.float32), name))
        return name

    def model(self, graph_name: str, *, batch: int, image_size: int, classes: int, opset: int,
              doc: str) -> onnx.ModelProto:
        """The checked model: input "data" (batch, 3, image_size, image_size), output "logits"."""
        graph = helper.make_graph(
            self.nodes, graph_name,
            [helper.make_tensor_value_info("data", TensorProto.FLOAT, [batch, 3, image_size, image_size])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="vtakit.zoo")
        model.doc_string = doc
        onnx.checker.check_model(model)
        return model
