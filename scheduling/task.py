"""Tuning tasks: one operator workload on one accelerator configuration.

A task is plain data (picklable, hashable), so it travels to process-pool and
Dask workers as it is.  Its `key` is the compiler's workload key
(`compiler.dispatch.conv2d_key`), so what the tuner records is what the
compiler looks up.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.compiler.backends.vta.dispatch import conv2d_key
from vtakit.compiler.backends.vta.heuristics import ConvShape, conv_shape
from vtakit.compiler.backends.vta.te import epilogue
from vtakit.compiler.backends.vta.layers import WORKLOADS, ConvLayer, DenseLayer
from vtakit.errors import VtaError
from vtakit.isa.config import HwConfig

# VTA's benchmark epilogue (test_benchmark_topi_conv2d): + bias, >> 8, clip to [0, 127].
BENCH_SHIFT, BENCH_CLIP = 8, (0, 127)


@dataclass(frozen=True)
class ConvTask:
    """A convolution (dense: 1x1 on a 1x1 image) with a bias + shift + clip epilogue."""

    name: str
    cfg: HwConfig
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kernel: int
    stride: int = 1
    pad: int = 0
    shift: int = BENCH_SHIFT
    clip: tuple[int, int] = BENCH_CLIP
    repeats: int = 1

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c_in, self.h, self.w)

    @property
    def w_shape(self) -> tuple[int, int, int, int]:
        return (self.c_out, self.c_in, self.kernel, self.kernel)

    @property
    def out_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad - self.kernel) // self.stride + 1,
                (self.w + 2 * self.pad - self.kernel) // self.stride + 1)

    @property
    def macs(self) -> int:
        oh, ow = self.out_hw
        return self.n * self.c_out * oh * ow * self.c_in * self.kernel ** 2

    @property
    def epilogue(self) -> tuple[str, ...]:
        bias_marker = True   # conv2d_def reads the bias through an acc access: any non-None value
        return tuple(step.op.name for step in epilogue(self.cfg, bias_marker, self.shift, self.clip))

    @property
    def key(self) -> str:
        return conv2d_key(x_shape=self.x_shape, w_shape=self.w_shape, stride=self.stride, padding=self.pad,
                          epilogue=self.epilogue)

    @property
    def shape(self) -> ConvShape:
        """The task in blocks, as the default heuristic and the features see it."""
        return conv_shape(self.cfg, n=self.n, c_in=self.c_in, h=self.h, w=self.w, c_out=self.c_out,
                          kh=self.kernel, kw=self.kernel, stride=self.stride, pad=self.pad,
                          epilogue_ops=len(self.epilogue), planes=1, vectors=0, bias_wgt=True)  # bias by GEMM

    @property
    def peak_cycles(self) -> float:
        """Cycles at 100 % GEMM utilization: the floor no schedule beats."""
        return self.macs / self.cfg.peak_macs_per_cycle


def task_from_layer(layer: ConvLayer | DenseLayer, cfg: HwConfig) -> ConvTask:
    if isinstance(layer, DenseLayer):
        return ConvTask(layer.name, cfg, layer.batch, layer.c_in, 1, 1, layer.c_out, 1)
    return ConvTask(layer.name, cfg, layer.batch, layer.c_in, layer.hw, layer.hw, layer.c_out, layer.kernel,
                    layer.stride, layer.pad, repeats=layer.repeats)


def workload_tasks(workload: str, cfg: HwConfig | str, layers: list[str] | None = None) -> list[ConvTask]:
    """The tasks of a reference workload: by default the layers VTA offloads (ResNet-18: C2-C11);
    `layers` may name any of its convolutions and its dense layer ("dense")."""
    cfg = HwConfig.load(cfg)
    if workload not in WORKLOADS:
        raise VtaError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    convs, denses = WORKLOADS[workload]
    table = {layer.name: layer for layer in (*convs, *denses)}
    if not layers:
        return [task_from_layer(layer, cfg) for layer in convs if layer.vta_offloads]
    missing = [name for name in layers if name not in table]
    if missing:
        raise VtaError(f"no layer {missing[0]!r} in {workload} (layers: {', '.join(table)})")
    return [task_from_layer(table[name], cfg) for name in layers]
