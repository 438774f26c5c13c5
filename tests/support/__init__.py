"""Helpers the tests share: the independent reference interpreter (`reference`), small programs, numpy
references of the host kernels (`cpu_reference`), the guard-byte harness (`guards`), the kernel property
cases (`kernel_cases`, `kernel_properties`, `sweep`) and the GPU test doubles (`fake_driver`, `gpu_marks`).

Imported as `tests.support.<module>`; pytest puts the repository root on sys.path (pyproject's
`pythonpath`), so no test edits sys.path.
"""
