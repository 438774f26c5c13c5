"""Lowering passes, each a module of its own with its own tests:

capacity (on-chip buffer allocation and checks), dma (transfers with padding),
tensorize (matching the compute to the GEMM / ALU intrinsics), uops (loop folding,
micro-op kernels, the resident micro-op cache) and tokens (dependency tokens).
"""
