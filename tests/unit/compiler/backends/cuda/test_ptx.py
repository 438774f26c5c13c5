"""PTX for every kernel family, generated without a GPU: the IR carries the kernel annotation, the tiled
and reduction kernels use shared memory and barriers, and ptxas (when present) assembles it all for sm_80
and sm_90 without spills."""

import numpy as np
import pytest

from tests.support.gpu_marks import needs_ptxas
from vtakit.compiler.backends import cuda
from vtakit.compiler.backends.cuda import target
from vtakit.errors import CompileError

F32, I8, I32 = np.float32, np.int8, np.int32


def _zeros(recorder, shape, dtype):
    return recorder.empty(shape, dtype)


# (case name, function of a Recorder that calls one operator, whether its kernels cooperate through shared memory)
CASES = [
    ("conv2d float 3x3", lambda r: cuda.conv2d(_zeros(r, (1, 64, 56, 56), F32), np.zeros((64, 64, 3, 3), F32),
                                                np.zeros(64, F32), pads=(1, 1, 1, 1), gpu=r), True),
    ("conv2d int8 requantised, stride 2", lambda r: cuda.conv2d(
        _zeros(r, (1, 32, 28, 28), I8), np.zeros((48, 32, 3, 3), I8), np.zeros(48, I32), stride=2,
        pads=(1, 1, 1, 1), shift=7, clip=(0, 127), gpu=r), True),
    ("conv2d grouped, dilated", lambda r: cuda.conv2d(_zeros(r, (2, 8, 9, 9), F32), np.zeros((16, 2, 3, 3), F32),
                                                      groups=4, dilation=2, gpu=r), True),
    ("conv2d 7x7/2 first layer", lambda r: cuda.conv2d(_zeros(r, (1, 3, 224, 224), F32),
                                                       np.zeros((64, 3, 7, 7), F32), stride=2, pads=(3, 3, 3, 3),
                                                       gpu=r), True),
    ("depthwise float", lambda r: cuda.conv2d(_zeros(r, (1, 32, 112, 112), F32), np.zeros((32, 1, 3, 3), F32),
                                              np.zeros(32, F32), groups=32, pads=(1, 1, 1, 1), gpu=r), False),
    ("depthwise int8", lambda r: cuda.conv2d(_zeros(r, (1, 16, 20, 20), I8), np.zeros((16, 1, 3, 3), I8),
                                             groups=16, stride=2, shift=4, gpu=r), False),
    ("dense float", lambda r: cuda.dense(_zeros(r, (1, 512), F32), np.zeros((1000, 512), F32),
                                        np.zeros(1000, F32), gpu=r), True),
    ("dense int8 int32 out", lambda r: cuda.dense(_zeros(r, (40, 100), I8), np.zeros((70, 100), I8), gpu=r), True),
    ("matmul batched", lambda r: cuda.matmul(_zeros(r, (3, 20, 30), F32), np.zeros((30, 50), F32), gpu=r), True),
    ("max pool float 3x3/2", lambda r: cuda.max_pool2d(_zeros(r, (1, 64, 112, 112), F32), kernel=3, stride=2,
                                                       pads=(1, 1, 1, 1), gpu=r), False),
    ("max pool int8", lambda r: cuda.max_pool2d(_zeros(r, (1, 16, 10, 10), I8), kernel=2, stride=2, pads=0,
                                                gpu=r), False),
    ("avg pool float", lambda r: cuda.avg_pool2d(_zeros(r, (1, 8, 10, 10), F32), kernel=3, stride=2, pads=1,
                                                 gpu=r), False),
    ("avg pool int8", lambda r: cuda.avg_pool2d(_zeros(r, (1, 8, 10, 10), I8), kernel=2, stride=2, pads=0,
                                                gpu=r), False),
    ("global avg pool float", lambda r: cuda.global_avg_pool(_zeros(r, (1, 512, 7, 7), F32), gpu=r), True),
    ("global avg pool int8", lambda r: cuda.global_avg_pool(_zeros(r, (2, 16, 12, 12), I8), gpu=r), True),
    ("softmax", lambda r: cuda.softmax(_zeros(r, (1, 1000), F32), gpu=r), True),
    ("softmax inner axis", lambda r: cuda.softmax(_zeros(r, (2, 5, 7), F32), axis=1, gpu=r), True),
    ("add broadcast", lambda r: cuda.add(_zeros(r, (1, 64, 56, 56), F32), np.zeros((64, 1, 1), F32), gpu=r), False),
    ("sub", lambda r: cuda.sub(_zeros(r, (10, 3), F32), np.zeros(3, F32), gpu=r), False),
    ("mul", lambda r: cuda.mul(_zeros(r, (10, 3), F32), np.zeros((10, 1), F32), gpu=r), False),
    ("relu int32", lambda r: cuda.relu(_zeros(r, (100,), I32), gpu=r), False),
    ("clip float", lambda r: cuda.clip(_zeros(r, (100,), F32), 0.0, 6.0, gpu=r), False),
    ("add int8", lambda r: cuda.add_int8(_zeros(r, (1, 64, 8, 8), I8), _zeros(r, (1, 64, 8, 8), I8), shift=1,
                                         gpu=r), False),
    ("quantize", lambda r: cuda.quantize(_zeros(r, (1, 3, 8, 8), F32), 5, gpu=r), False),
    ("dequantize", lambda r: cuda.dequantize(_zeros(r, (1, 10), I32), 9, gpu=r), False),
    ("batch norm", lambda r: cuda.batch_norm(_zeros(r, (1, 4, 5, 5), F32), *[np.ones(4, F32)] * 4, gpu=r), False),
    ("quantize linear", lambda r: cuda.quantize_linear(_zeros(r, (50,), F32), 0.05, 3, np.uint8, gpu=r), False),
    ("dequantize linear", lambda r: cuda.dequantize_linear(_zeros(r, (50,), I8), 0.05, -2, gpu=r), False),
    ("transpose", lambda r: cuda.transpose(_zeros(r, (1, 64, 56, 56), F32), (0, 2, 3, 1), gpu=r), False),
    ("pad", lambda r: cuda.pad(_zeros(r, (1, 3, 5, 5), F32), [0, 0, 1, 2, 0, 0, 2, 1], value=-1.5, gpu=r), False),
    ("concat", lambda r: cuda.concat([_zeros(r, (1, 3, 4, 4), I8), _zeros(r, (1, 5, 4, 4), I8)], 1, gpu=r), False),
    ("pack activation", lambda r: cuda.pack_activation(_zeros(r, (1, 20, 7, 7), I8), 1, 16, gpu=r), False),
    ("unpack activation", lambda r: cuda.unpack_activation(_zeros(r, (1, 2, 7, 7, 1, 16), I8), 1, 20, gpu=r), False),
]


@pytest.fixture(scope="module")
def recorded():
    """Every case run once on a Recorder: {case: (recorder, cooperative)}."""
    out = {}
    for name, run, cooperative in CASES:
        recorder = cuda.Recorder("sm_80")
        run(recorder)
        out[name] = (recorder, cooperative)
    return out


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_ir_and_ptx_have_what_each_family_promises(recorded, case):
    recorder, cooperative = recorded[case]
    assert recorder.kernels, "the operator launched nothing"
    for kernel in recorder.kernels:
        built = kernel.built("gpu")
        ir_text = built.ir_text
        ptx = kernel.ptx("sm_80")
        assert 'target triple = "nvptx64-nvidia-cuda"' in ir_text
        assert '!"kernel", i32 1' in ir_text and "!nvvm.annotations" in ir_text
        assert f".visible .entry {kernel.name}(" in ptx and ".target sm_80" in ptx
        assert f".maxntid {kernel.launch.threads}" in ptx
        assert "llvm.nvvm.read.ptx.sreg.tid.x" in ir_text and "%tid.x" in ptx
        assert ("addrspace(3)" in ir_text) == cooperative == ("bar.sync" in ptx) == (".shared" in ptx)
        assert ("llvm.nvvm.barrier0" in ir_text) == cooperative == built.uses_barrier
        assert (built.shared_bytes > 0) == cooperative
        assert ".local" not in ptx, "a value went to local memory (an alloca survived)"


def test_tiled_kernels_keep_their_accumulators_in_registers(recorded):
    """The 64-wide tiles give each thread 4 accumulators per row of the tile: all in registers, none spilled."""
    recorder, _ = recorded["conv2d 7x7/2 first layer"]
    kernel = recorder.kernels[0]
    assert kernel.name == "conv2d" and kernel.launch.block == (16, 16, 1)
    assert kernel.spec.tile.columns == 64
    tile = kernel.spec.tile
    per_k_step = cuda.gemm.DEPTH * (tile.rows // 16) * (tile.columns // 16)  # unrolled multiply-adds
    assert kernel.ptx("sm_80").count("fma.rn.f32") >= per_k_step


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_assembles_every_kernel(recorded, arch):
    for name, (recorder, _) in recorded.items():
        for kernel in recorder.kernels:
            result = cuda.assemble(kernel.ptx(arch), arch)
            assert result.spill_bytes == 0, (name, result.log)
            assert 0 < result.registers <= 255, (name, result.log)
            assert result.shared_bytes == kernel.built("gpu").shared_bytes, (name, result.log)


@needs_ptxas
def test_ptxas_errors_are_one_line():
    with pytest.raises(CompileError, match=r"ptxas -arch=sm_80 rejected the PTX: .*error"):
        cuda.assemble(".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry broken( { bogus; }", "sm_80")


def test_ptx_is_cached_by_ir_and_arch():
    recorder = cuda.Recorder("sm_80")
    cuda.relu(recorder.empty((123,), F32), gpu=recorder)
    kernel = recorder.kernels[0]
    first = kernel.ptx("sm_80")
    size = target.ptx_cache_size()
    assert kernel.ptx("sm_80") is first and target.ptx_cache_size() == size
    newer = kernel.ptx("sm_90")
    assert ".target sm_90" in newer and target.ptx_cache_size() == size + 1


def test_launch_shapes_follow_the_rules():
    recorder = cuda.Recorder()
    cuda.relu(recorder.empty((10_000_000,), F32), gpu=recorder)          # grid-stride: capped grid
    cuda.softmax(recorder.empty((4, 10), F32), gpu=recorder)             # a block per row, a warp at least
    cuda.dense(recorder.empty((1, 512), F32), np.zeros((1000, 512), F32), gpu=recorder)  # 16-row tiles
    relu, softmax, dense = recorder.kernels
    assert relu.launch.grid == (8192, 1, 1) and relu.launch.block == (256, 1, 1)
    assert softmax.launch.grid == (4, 1, 1) and softmax.launch.block == (32, 1, 1)
    assert dense.spec.tile == cuda.gemm.GemmTile(16, 16) and dense.launch.grid == (1, 63, 1)


def test_bad_arch_and_oversized_launches_are_one_line_errors():
    with pytest.raises(CompileError, match="GPU arch must look like sm_80"):
        cuda.GpuTarget("compute_80")
    recorder = cuda.Recorder()
    with pytest.raises(CompileError, match="grid .* exceeds CUDA's limits"):
        cuda.matmul(recorder.empty((70000, 2, 2), F32), np.zeros((2, 2), F32), gpu=recorder)
