"""Rule cases of tests/rules/cases/ga11*.py, on synthetic traces."""

from __future__ import annotations

from tests.rules.harness import RuleCase, RuleHarness

CASE_FILES = "ga11*"


def test_rule_case(rule_case: RuleCase, rule_harness: RuleHarness) -> None:
    rule_harness.check(rule_case)
