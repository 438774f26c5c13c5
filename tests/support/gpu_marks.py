"""Skips that say why: `needs_gpu` runs only with a CUDA GPU and driver, `needs_ptxas` only with ptxas."""

import pytest

from vtakit.compiler.backends import cuda

GPU_OK, GPU_REASON = cuda.gpu_available()
needs_gpu = pytest.mark.skipif(not GPU_OK, reason=GPU_REASON)
needs_ptxas = pytest.mark.skipif(cuda.find_ptxas() is None,
                                 reason="ptxas is not on the PATH: the generated PTX is not assembled")
