"""The onnx package's own backend node tests (onnx/backend/test/data/node) on target cpu: every test
whose ops the registry's families define (a sample of them: tests/unit/compiler/ops/test_node_backend.py)."""

from __future__ import annotations

import pytest

from tests.support import node_tests


@pytest.mark.slow
def test_every_supported_node_test():
    results = node_tests.run()
    supported = {k: v for k, v in results.items() if v[0] != "unsupported"}
    passed = [k for k, v in supported.items() if v[0] == "pass"]
    print(f"passed {len(passed)} / supported {len(supported)} / total {len(results)}")
    failed = {k: v for k, v in supported.items() if v[0] != "pass"}
    assert not failed, failed
