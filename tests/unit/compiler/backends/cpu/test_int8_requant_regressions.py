"""The int8 requantizing convolution at the shapes that once came out wrong (issue 13).

The cause was the store of a panel's last, partial vector of int8 outputs: it
went through `llvm.masked.store` of a truncated vector, and LLVM's x86 back end
(AVX-512) turned a one-lane masked truncating store into a 4-byte scalar store,
so each row's last output also zeroed the next row's first three bytes and the
last row wrote three bytes past the output buffer. The kernels now store
narrow tails lane by lane; these tests pin both the numbers and that rule.
"""

from tests.support import cpu_reference as ref
import llvmlite.binding as llvm
import numpy as np
import pytest

from vtakit.compiler.backends import cpu
from vtakit.compiler.backends.host.checks import Requant
from vtakit.compiler.backends.cpu.conv import ConvKernel, _build_conv
from vtakit.compiler.backends.cpu.gemm import Tile
from vtakit.compiler.backends.host.conv import ConvGeometry
from vtakit.compiler.backends.cpu.jit import host_target

# (input channels, output channels, size, kernel, pad): the shapes of the issue
ISSUE_SHAPES = [(192, 1152, 7, 1, 0), (64, 64, 7, 3, 1), (253, 1063, 9, 3, 1)]


@pytest.mark.parametrize("shape", ISSUE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_requantized_conv_matches_numpy_at_the_issue_shapes(shape):
    channels, outputs, size, kernel, pad = shape
    rng = np.random.default_rng(13)
    x = rng.integers(-128, 128, (1, channels, size, size)).astype(np.int8)
    w = rng.integers(-128, 128, (outputs, channels, kernel, kernel)).astype(np.int8)
    bias = rng.integers(-20000, 20000, outputs).astype(np.int32)
    got = cpu.conv2d(x, w, bias, pads=(pad,) * 4, shift=9, clip=(0, 96))
    want = ref.conv2d(x, w, bias, pads=(pad,) * 4, shift=9, clip=(0, 96))
    np.testing.assert_array_equal(got, want)


def _optimised_ir(ir_text: str, cpu_name: str) -> tuple[str, str]:
    """(optimised IR, assembly) of a kernel module for another x86 CPU (emitted, never run)."""
    host_target()  # LLVM initialised
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=cpu_name, features="-prefer-256-bit", opt=3)
    module = llvm.parse_assembly(ir_text)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return str(module), machine.emit_assembly(module)


def test_int8_tail_stores_are_byte_stores_on_avx512():
    """The 1x1 192->1152 7x7 kernel as an AVX-512 host builds it: 49 = 32 + 17 positions per row, so each
    row ends in a one-lane tail. No narrow masked store may reach the back end, and the tail must be written
    with a one-byte store (the miscompile wrote it with `vmovd`, four bytes)."""
    geometry = ConvGeometry(1, 192, 7, 7, 1152, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, 7, 7)
    spec = ConvKernel(geometry, True, True, Requant(9, 0, 96), Tile(rows=8, vectors=2, lanes=16))
    ir_text, _, _ = _build_conv(spec)
    assert "llvm.masked.store.v16i8" not in ir_text
    optimised, assembly = _optimised_ir(ir_text, "skylake-avx512")
    assert "masked.store" not in optimised
    tail_stores = [line.split()[0] for line in assembly.splitlines() if "48(%" in line and "%r" in line
                   and line.strip().startswith(("v", "mov"))]
    assert tail_stores and set(tail_stores) <= {"vpextrb", "movb"}, tail_stores
