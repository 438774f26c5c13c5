"""Reference workloads (../shared/WORKLOADS.md): ResNet-18's convolution layers and its dense layer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConvLayer:
    name: str
    hw: int
    c_in: int
    c_out: int
    kernel: int
    pad: int
    stride: int
    repeats: int = 1
    batch: int = 1
    vta_offloads: bool = True
    """False for layers VTA keeps on the CPU (ResNet-18's first convolution)."""

    @property
    def out_hw(self) -> int:
        return (self.hw + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.batch * self.c_out * self.out_hw ** 2 * self.c_in * self.kernel ** 2


@dataclass(frozen=True)
class DenseLayer:
    name: str
    c_in: int
    c_out: int
    batch: int = 1

    @property
    def macs(self) -> int:
        return self.batch * self.c_in * self.c_out


RESNET18 = [
    ConvLayer("C1", 224, 3, 64, 7, 3, 2, vta_offloads=False),
    ConvLayer("C2", 56, 64, 64, 3, 1, 1, repeats=4),
    ConvLayer("C3", 56, 64, 128, 3, 1, 2),
    ConvLayer("C4", 56, 64, 128, 1, 0, 2),
    ConvLayer("C5", 28, 128, 128, 3, 1, 1, repeats=3),
    ConvLayer("C6", 28, 128, 256, 3, 1, 2),
    ConvLayer("C7", 28, 128, 256, 1, 0, 2),
    ConvLayer("C8", 14, 256, 256, 3, 1, 1, repeats=3),
    ConvLayer("C9", 14, 256, 512, 3, 1, 2),
    ConvLayer("C10", 14, 256, 512, 1, 0, 2),
    ConvLayer("C11", 7, 512, 512, 3, 1, 1, repeats=3),
]
RESNET18_DENSE = [DenseLayer("dense", 512, 1000)]

WORKLOADS = {"resnet18": (RESNET18, RESNET18_DENSE)}
