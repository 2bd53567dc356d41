"""`gpuadvisor.testing`, the rule harness shipped for plugin authors, on SYNTHETIC traces
(tests/synth.py): traces given as objects, dicts or files, rules by id from a folder, the rule
contract checked, and failed expectations that say what the rule produced."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.engine import RuleLoadError
from gpuadvisor.rules_api import Category, Rule
from gpuadvisor.testing import Expect, RuleCase, RuleHarness, collect_cases
from tests.rules.cases.ga2_host_sync import _steps, item_read


def test_trace_as_object_dict_or_file_gives_the_same_outcome(tmp_path: Path) -> None:
    trace = _steps(8, item_read)
    harness = RuleHarness(tmp_path)
    from_object = harness.run("GA201", trace)
    from_dict = harness.run("GA201", trace.to_dict())
    plain = trace.write(tmp_path / "t.json")
    from_file = harness.run("blocking-scalar-reads", plain)
    assert from_object.status == from_dict.status == from_file.status == "ran"
    assert from_object.first.impact == from_dict.first.impact == from_file.first.impact
    assert from_object.first.impact is not None and from_object.first.impact > 0.2


def test_failed_expectation_says_what_was_produced(tmp_path: Path) -> None:
    case = RuleCase("GA201-wrongly-expected-quiet", "GA201", lambda: _steps(8, item_read), Expect(fires=False))
    with pytest.raises(AssertionError, match=r"(?s)GA201-wrongly-expected-quiet: expected no finding.*high impact="):
        RuleHarness(tmp_path).check(case)


def test_rules_from_a_folder_by_id_and_the_contract_is_checked(tmp_path: Path) -> None:
    folder = tmp_path / "myrules"
    folder.mkdir()
    (folder / "xq001.py").write_text(
        "from gpuadvisor.rules_api import Category, Rule\n"
        "class Quiet(Rule):\n"
        '    """Never fires.\n\n    Why it matters\n    --------------\n    x\n\n'
        "    How it is detected\n    ------------------\n    x\n\n    How to fix\n    ----------\n    x\n"
        '    """\n'
        '    id = "XQ001"\n    name = "quiet"\n    category = Category.MEMORY\n'
        "    def check(self, ctx):\n        return []\n"
    )
    harness = RuleHarness(tmp_path / "work", rules_dirs=[folder])
    assert harness.run("XQ001", _steps(4, None)).status == "ran"

    class Undocumented(Rule):
        id = "XU001"
        name = "undocumented"
        category = Category.MEMORY

        def check(self, ctx):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(RuleLoadError, match="docstring must have a summary line and sections"):
        harness.run(Undocumented, _steps(4, None))


def test_collect_cases_from_any_folder(tmp_path: Path) -> None:
    (tmp_path / "acme_cases.py").write_text(
        "from gpuadvisor.testing import Expect, RuleCase\n"
        "CASES = [RuleCase('a', 'GA201', dict, Expect(fires=False)), RuleCase('b', 'GA201', dict, Expect(fires=False))]\n"
    )
    (tmp_path / "_helpers.py").write_text("raise RuntimeError('never imported')\n")
    assert [c.name for c in collect_cases(tmp_path, "acme*")] == ["a", "b"]
    (tmp_path / "acme_more.py").write_text(
        "from gpuadvisor.testing import Expect, RuleCase\nCASES = [RuleCase('a', 'GA201', dict, Expect(fires=False))]\n"
    )
    with pytest.raises(AssertionError, match="duplicate rule case names"):
        collect_cases(tmp_path, "acme*")
