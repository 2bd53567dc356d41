"""Markdown, JUnit and SARIF renderers on synthetic AnalysisResults (tests/ci/results.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from gpuadvisor.errors import ConfigError
from gpuadvisor.render import junit, markdown, sarif

from .results import HOSTILE, clean_result, sample_result

# ---------------------------------------------------------------------------------------------- markdown


def table_rows(text: str) -> list[list[str]]:
    """Split GFM table rows on unescaped pipes (what a Markdown renderer does)."""
    import re

    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append([c.strip() for c in cells])
    return rows


def test_markdown_verdict_table_and_escaping() -> None:
    text = markdown.render(sample_result(), fail_on="high")
    assert text.splitlines()[0] == "## gpuadvisor"
    assert "FAIL**: 1 finding at or above `high`" in text
    rows = table_rows(text)
    assert rows[0] == ["Severity", "Rule", "Title", "Impact", "Location"]
    # every row has exactly five cells even with '|' in kernel names and titles
    assert all(len(r) == 5 for r in rows), rows
    body = rows[1:]
    assert [r[0] for r in body] == ["**high**", "medium", "low", "internal error"]
    assert body[0][3] == "31.0%" and body[0][4] == "train.py:36"
    # hostile title: no raw HTML, pipes escaped
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "a\\|b" in text
    assert "Top recommendation** (GA201 blocking-scalar-reads): synthetic fix for GA201" in text
    assert "**Metrics:** step time 6.70 ms (profiled) · steps analyzed 8 · GPU busy (compute) 41.0%" in text
    assert "MFU" not in text  # None metrics are left out, never shown as 0
    assert "1 rule not applicable" in text and "1 rule failed internally (GA999)" in text
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_markdown_gate_levels_and_no_gate() -> None:
    assert "PASS**: nothing at or above `high`" in markdown.render(clean_result(), fail_on="high")
    assert "FAIL**: 1 finding at or above `low`" in markdown.render(clean_result(), fail_on="low")
    text = markdown.render(sample_result())
    assert "PASS" not in text and "FAIL" not in text
    assert "3 findings (1 high, 1 medium, 1 low)" in text


def test_markdown_deterministic_and_empty() -> None:
    assert markdown.render(sample_result(), fail_on="medium") == markdown.render(
        sample_result(), fail_on="medium"
    )
    empty = clean_result()
    empty.findings = []
    text = markdown.render(empty, fail_on="high")
    assert "No findings." in text and "0 findings" in text


def test_markdown_escape_unit() -> None:
    assert markdown.escape("a|b<c>&d") == "a\\|b&lt;c&gt;&amp;d"
    assert markdown.escape("x\ny   z") == "x y z"
    assert len(markdown.escape("k" * 500)) == markdown.MAX_CELL


# ---------------------------------------------------------------------------------------------- junit


def parse_junit(text: str) -> ET.Element:
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>')
    return ET.fromstring(text.encode("utf-8"))


def test_junit_structure_and_counts() -> None:
    root = parse_junit(junit.render(sample_result()))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    cases = suite.findall("testcase")
    by_name = {c.get("name"): c for c in cases}
    assert sorted(by_name) == [
        "GA201 blocking-scalar-reads",
        "GA301 pageable-copies",
        "GA401 dataloader-starvation",
        "GA701 clock-throttling",
        "GA801 memory-headroom",
        "GA999 broken-rule",
    ]
    # counts in the suite and the root match the elements
    for element in (suite, root):
        assert element.get("tests") == str(len(cases))
        assert element.get("failures") == str(sum(1 for c in cases if c.find("failure") is not None))
        assert element.get("errors") == str(sum(1 for c in cases if c.find("error") is not None))
        assert element.get("skipped") == str(sum(1 for c in cases if c.find("skipped") is not None))
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "1", "2")

    ga201 = by_name["GA201 blocking-scalar-reads"]
    assert ga201.get("classname") == "gpuadvisor.host_sync"
    failure = ga201.find("failure")
    assert failure is not None and failure.get("message") == "loss.item() blocks every step"
    assert failure.get("type") == "high"
    assert "train.py:36: hist.append(loss.item())" in (failure.text or "")
    assert '"per_step_ms": 1.5' in (failure.text or "")  # evidence in the body
    # medium finding is below the default high gate: reported, not failed
    ga301 = by_name["GA301 pageable-copies"]
    assert ga301.find("failure") is None and HOSTILE in (ga301.findtext("system-out") or "")
    assert ga301.get("classname") == "gpuadvisor.host_device_transfer"
    skipped = by_name["GA701 clock-throttling"].find("skipped")
    assert skipped is not None and "needs NVML samples" in (skipped.get("message") or "")
    assert by_name["GA801 memory-headroom"].find("skipped") is not None
    error = by_name["GA999 broken-rule"].find("error")
    assert error is not None and "ZeroDivisionError" in (error.get("message") or "")
    ga401 = by_name["GA401 dataloader-starvation"]
    assert len(list(ga401)) == 0  # ran clean: a passing test case


def test_junit_fail_on_threshold_moves_failures() -> None:
    medium = parse_junit(junit.render(sample_result(), fail_on="medium")).find("testsuite")
    assert medium is not None and medium.get("failures") == "2"
    low = parse_junit(junit.render(sample_result(), fail_on="low")).find("testsuite")
    assert low is not None
    ga301 = next(c for c in low.findall("testcase") if c.get("name", "").startswith("GA301"))
    failure = ga301.find("failure")
    assert failure is not None and "(+1 more)" in (failure.get("message") or "")
    none = parse_junit(junit.render(sample_result(), fail_on="none")).find("testsuite")
    assert none is not None and none.get("failures") == "0"
    with pytest.raises(ConfigError):
        junit.render(sample_result(), fail_on="bogus")


def test_junit_control_characters_stay_valid_xml() -> None:
    result = clean_result()
    from dataclasses import replace

    result.findings = [replace(result.findings[0], title="bad \x00\x1b char & <tag>")]
    root = parse_junit(junit.render(result, fail_on="low"))
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.get("message") == "bad \ufffd\ufffd char & <tag>"


def test_junit_deterministic() -> None:
    assert junit.render(sample_result()) == junit.render(sample_result())


# ---------------------------------------------------------------------------------------------- sarif


def check_sarif_structure(log: dict[str, Any]) -> dict[str, int]:
    """The parts of the SARIF 2.1.0 schema that consumers (GitHub code scanning) rely on; the official
    JSON schema is not shipped by any PyPI package we can install offline, so these checks mirror its
    `required` lists and enums: sarifLog{version, runs}, run{tool}, tool{driver}, toolComponent{name},
    reportingDescriptor{id}, result{message}, message{text}, level enum, region.startLine >= 1.

    Returns how many of each part it checked, so a caller can assert that the parts it expects were
    there (a loop over an empty list checks nothing)."""
    checked = {"rules": 0, "results": 0, "physical": 0, "logical": 0, "regions": 0, "invocations": 0}
    assert log["version"] == "2.1.0"
    assert isinstance(log["$schema"], str) and "sarif" in log["$schema"]
    runs = log["runs"]
    assert isinstance(runs, list) and len(runs) == 1
    run = runs[0]
    driver = run["tool"]["driver"]
    assert (
        driver["name"] == "gpuadvisor"
        and driver["version"]
        and driver["informationUri"].startswith("https://")
    )
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for rule in driver["rules"]:
        for key in ("shortDescription", "fullDescription", "help"):
            assert isinstance(rule[key]["text"], str) and rule[key]["text"]
        assert rule["defaultConfiguration"]["level"] in {"none", "note", "warning", "error"}
        assert rule["name"]
        checked["rules"] += 1
    for res in run["results"]:
        assert res["level"] in {"none", "note", "warning", "error"}
        assert isinstance(res["message"]["text"], str) and res["message"]["text"]
        assert ids[res["ruleIndex"]] == res["ruleId"]
        checked["results"] += 1
        for loc in res.get("locations", []):
            assert ("physicalLocation" in loc) != ("logicalLocations" in loc)
            if "logicalLocations" in loc:
                assert all(item["name"] for item in loc["logicalLocations"])
                checked["logical"] += 1
                continue
            phys = loc["physicalLocation"]
            assert phys["artifactLocation"]["uri"]
            checked["physical"] += 1
            if "region" in phys:
                assert isinstance(phys["region"]["startLine"], int) and phys["region"]["startLine"] >= 1
                checked["regions"] += 1
    for inv in run["invocations"]:
        assert isinstance(inv["executionSuccessful"], bool)
        checked["invocations"] += 1
    return checked


def test_sarif_structure_levels_locations() -> None:
    text = sarif.render(sample_result(), fail_on="high")
    log = json.loads(text)
    checked = check_sarif_structure(log)
    # every kind of part was there to check: 6 rules, 3 results, file and kernel locations, regions
    assert checked == {"rules": 6, "results": 3, "physical": 1, "logical": 2, "regions": 1, "invocations": 1}
    run = log["runs"][0]
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["GA201", "GA301", "GA301"]  # internal error is not a result
    assert [r["level"] for r in results] == ["error", "warning", "note"]
    phys = results[0]["locations"][0]["physicalLocation"]
    assert phys["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert phys["region"]["startLine"] == 36
    logical = results[1]["locations"][0]["logicalLocations"][0]
    assert logical["name"].startswith("void at::native::_kernel_<float|int>")
    # an absolute path outside the recorded working directory is named, never a file:// URI to open
    absolute = results[2]["locations"][0]
    assert "physicalLocation" not in absolute and "file:" not in json.dumps(log)
    assert absolute["logicalLocations"][0]["name"].startswith("/abs/path/data.py:")
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert len(notes) == 1 and "ZeroDivisionError" in notes[0]["message"]["text"]
    assert run["properties"]["notApplicableRules"] == ["GA701"]
    assert results[0]["properties"]["impact"] == 0.31
    assert results[0]["properties"]["evidence"]["nan"] is None  # NaN never reaches JSON
    assert text == sarif.render(sample_result(), fail_on="high")


def test_sarif_finding_without_location_and_paths() -> None:
    result = clean_result()
    log = json.loads(sarif.render(result))
    checked = check_sarif_structure(log)
    assert checked["results"] == 1 and checked["physical"] == checked["logical"] == 0
    assert "locations" not in log["runs"][0]["results"][0]
    assert sarif._relative_parts("./src/my file.py", None) == ["src", "my file.py"]
    assert sarif._relative_parts("/work/p/src/a.py", "/work/p") == ["src", "a.py"]
    for outside in ("C:\\work\\train.py", "/etc/passwd", "../../etc/passwd", "src/../../x.py"):
        assert sarif._relative_parts(outside, "/work/p") is None, outside


def test_sarif_check_catches_broken_structure() -> None:
    """The structural check itself must be able to fail."""
    log = json.loads(sarif.render(sample_result()))
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError):
        check_sarif_structure(log)


def test_rule_metadata_comes_from_the_result() -> None:
    """The renderers describe a rule from `AnalysisResult.rule_docs` (filled by the analysis from the
    rules it loaded), else from its findings: they never load the rules themselves."""
    import dataclasses

    from gpuadvisor.model import RuleMeta

    plain = json.loads(sarif.render(sample_result()))["runs"][0]["tool"]["driver"]["rules"]
    doc = RuleMeta("GA201", "blocking-scalar-reads", "host_sync", "Scalar reads block.", "Scalar reads block.\n\nMore.")
    documented = dataclasses.replace(sample_result(), rule_docs={"GA201": doc})
    rules = json.loads(sarif.render(documented))["runs"][0]["tool"]["driver"]["rules"]
    by_id = {r["id"]: r for r in rules}
    assert by_id["GA201"]["shortDescription"]["text"] == "Scalar reads block."
    # without rule_docs the title of its first finding stands in
    assert {r["id"]: r for r in plain}["GA201"]["shortDescription"]["text"] == "loss.item() blocks every step"


def test_markdown_cut_inside_a_code_span_keeps_it_a_code_span() -> None:
    """Issue 42 item 9: "Top recommendation" was cut inside a code span: the backtick left open, its
    escaped rest read as text with stray backslashes."""
    text = "Fix it: `" + "correct += int(preds[i].item() == y[i].item()) " * 20 + "` then more."
    cell = markdown.escape(text, 120)
    assert cell.count("`") == 2 and cell.endswith("…`")
    assert "\\_" not in cell.split("`")[1]  # inside the span nothing is escaped (it renders literally)


def test_markdown_has_the_combined_prediction_line() -> None:
    """Issue 42 item 9: the terminal said what the fixes give together; the Markdown did not."""
    from pathlib import Path

    from gpuadvisor.analysis import analyze

    result = analyze(Path(__file__).resolve().parents[2] / "sample_runs" / "transfer_bound-planted")
    out = markdown.render(result)
    line = next(ln for ln in out.splitlines() if ln.startswith("With the fixes of"))
    assert "GA101, GA102, GA103 together" in line and "(10.04x)" in line and "do not add up" in line
