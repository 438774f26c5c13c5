"""0-D operands keep their shape (found by the property tests of issue 13).

`np.ascontiguousarray` returns at least a 1-D array, so argument checking and
the GPU backends' uploads turned a 0-D operand into shape (1,): add(scalar,
scalar) came back 1-D where numpy broadcasting gives 0-D, and the "at least one
dimension" checks of softmax and matmul could never fire.  Layout kernels
(transpose, pad, ...) refuse 0-D as they always effectively did.
"""

import numpy as np
import pytest

from vtakit.compiler.backends import cpu, cuda
from vtakit.errors import CompileError

SCALAR = np.array(-1.5, np.float32)


@pytest.mark.parametrize("backend", ["cpu", "emulated"])
def test_elementwise_results_of_0d_operands_are_0d(backend):
    options = {} if backend == "cpu" else {"gpu": cuda.Emulator()}
    module = cpu if backend == "cpu" else cuda
    assert module.add(SCALAR, SCALAR, **options).shape == ()
    assert module.relu(SCALAR, **options).shape == () and module.relu(SCALAR, **options) == 0
    assert module.quantize(SCALAR, 2, **options).shape == ()
    assert module.add(SCALAR, np.ones((2, 3), np.float32), **options).shape == (2, 3)
    with pytest.raises(CompileError, match="x must have at least one dimension"):
        module.softmax(SCALAR, **options)
    with pytest.raises(CompileError, match="operands must have at least one dimension"):
        module.matmul(SCALAR, np.ones(3, np.float32), **options)
    with pytest.raises(CompileError, match="x has rank 0; layout kernels handle 1 to 6"):
        module.transpose(SCALAR, (), **options)


def test_emulator_uploads_keep_the_shape():
    assert cuda.Emulator().upload(SCALAR).shape == ()
