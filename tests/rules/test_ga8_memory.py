"""Rule cases of tests/rules/cases/ga8*.py, on synthetic traces."""

from __future__ import annotations

from tests.rules.harness import RuleCase, RuleHarness

CASE_FILES = "ga8*"


def test_rule_case(rule_case: RuleCase, rule_harness: RuleHarness) -> None:
    rule_harness.check(rule_case)


def test_allocator_churn_names_the_remedy_it_points_to(rule_harness: RuleHarness) -> None:
    from tests.rules.cases.ga8_memory import churn_every_step, retries_inside_ops

    assert rule_harness.run("GA802", churn_every_step()).first.remedy == "remove_empty_cache"
    assert rule_harness.run("GA802", retries_inside_ops()).first.remedy == "expandable_segments"
