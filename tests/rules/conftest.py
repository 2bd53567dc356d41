"""Shared fixtures of the rule tests: `rule_harness` (see tests/rules/harness.py) and the
`rule_case` parametrization: a test module that sets `CASE_FILES = "ga2*"` and takes a `rule_case`
argument runs once per RuleCase in tests/rules/cases/ga2*.py, with the case name as test id."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The repository root makes `tests.synth` and `tests.rules.harness` importable under any pytest
# import mode and from any working directory.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.rules.harness import RuleHarness, collect_cases  # noqa: E402


@pytest.fixture
def rule_harness(tmp_path: Path) -> RuleHarness:
    return RuleHarness(tmp_path)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "rule_case" not in metafunc.fixturenames:
        return
    pattern = getattr(metafunc.module, "CASE_FILES", "*")
    cases = collect_cases(pattern)
    metafunc.parametrize("rule_case", cases, ids=[c.name for c in cases])
