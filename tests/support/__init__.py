"""Helpers the tests share: the independent reference interpreter (`reference`), small programs, numpy
references of the host kernels (`cpu_reference`), the guard-byte harness (`guards`), the kernel property
cases (`kernel_cases`, `kernel_properties`, `sweep`), the GPU test doubles (`fake_driver`, `gpu_marks`), and
the cases a unit test shares with its slow half under tests/integration (`fused_pool_cases`,
`fixed_point_layers`, `precision_graphs`, `tuned_layers`).

Imported as `tests.support.<module>`; pytest puts the repository root on sys.path (pyproject's
`pythonpath`), so no test edits sys.path.
"""
