"""The precision rule (tests/unit/compiler/quant/test_precision_property.py states it) on 300 random
small graphs instead of the default suite's 25."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tests.support.precision_graphs import check_precision_rule, networks


@pytest.mark.slow
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(model=networks())
def test_precision_rule_on_many_random_graphs(model):
    check_precision_rule(model)
