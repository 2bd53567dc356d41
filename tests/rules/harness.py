"""The rule test harness, shipped as `gpuadvisor.testing` (plugin authors test their rules the same
way; docs/writing-rules.md). This module keeps the import path of our own tests and points
`collect_cases` at tests/rules/cases/.

Everything the rule tests build is SYNTHETIC (tests/synth.py marks the traces
`gpuadvisor_synthetic: true`). A file `tests/rules/cases/<name>.py` defines `CASES: list[RuleCase]`;
a test module sets `CASE_FILES = "ga2*"` and defines
`def test_rule_case(rule_case, rule_harness): rule_harness.check(rule_case)`; tests/rules/conftest.py
parametrizes `rule_case` with every case of the matching files, test id = case name.
"""

from __future__ import annotations

from pathlib import Path

from gpuadvisor.testing import Expect, RuleCase, RuleHarness, write_run_dir, write_trace
from gpuadvisor.testing import collect_cases as _collect_cases

__all__ = ["CASES_DIR", "Expect", "RuleCase", "RuleHarness", "collect_cases", "write_run_dir", "write_trace"]

CASES_DIR = Path(__file__).resolve().parent / "cases"


def collect_cases(pattern: str = "*") -> list[RuleCase]:
    """Every RuleCase of tests/rules/cases/<pattern>.py, in file then list order."""
    return _collect_cases(CASES_DIR, pattern)
