"""Data-driven SYNTHETIC cases of the rules GA0xx-GA3xx (tests/rules/cases/ga0*..ga3*.py)."""

from __future__ import annotations

import pytest

from tests.rules.harness import RuleCase, RuleHarness, collect_cases

CASES = [c for pattern in ("ga0*", "ga1*", "ga2*", "ga3*") for c in collect_cases(pattern)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_case(case: RuleCase, rule_harness: RuleHarness) -> None:
    rule_harness.check(case)
