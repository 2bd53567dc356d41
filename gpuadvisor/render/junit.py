"""JUnit XML: one test case per rule, so CI test dashboards show the rule set as a test suite.

- `<testcase classname="gpuadvisor.<category>" name="<id> <name>">` for every rule in the result;
- a `<failure>` when the rule produced findings at or above `fail_on` (default `high`): message = the
  first such finding's title, body = every such finding with its message, impact, locations and
  evidence; findings below the gate go to `<system-out>`;
- `<skipped>` for rules that were not applicable (with the missing inputs) or deselected;
- `<error>` for a rule that raised (internal-error finding or status "error").

Built with xml.etree (escaping is its job), with no timestamps or durations, so output is deterministic.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from gpuadvisor.model import Finding, RuleStatus, impact_base
from gpuadvisor.render._ci import fails, fmt_impact, gate, is_internal, rule_catalog

if TYPE_CHECKING:
    from gpuadvisor.result import AnalysisResult

__all__ = ["render"]

# XML 1.0 forbids most control characters, even escaped: a kernel name or message holding one would
# make the whole file unparsable, so they are replaced.
_XML_BAD = {c: "\ufffd" for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)}


def _clean(text: str) -> str:
    return str(text).translate(_XML_BAD)


def _describe(finding: Finding) -> str:
    lines = [
        f"[{finding.severity.value}] {finding.rule} {finding.name}: {finding.title}",
        f"impact: {fmt_impact(finding.impact, impact_base(finding))}",
        finding.message,
    ]
    for loc in finding.locations:
        lines.append(loc.place() + (f": {loc.code}" if loc.code else ""))
    if finding.recommendation:
        lines.append(f"recommendation: {finding.recommendation}")
    if finding.evidence:
        lines.append("evidence: " + json.dumps(finding.to_dict()["evidence"], sort_keys=True))
    return "\n".join(lines)


def render(result: AnalysisResult, *, fail_on: str | None = None) -> str:
    """The JUnit XML document (UTF-8 text with an XML declaration). `fail_on` defaults to high."""
    threshold = gate(fail_on, "high")
    catalog = rule_catalog(result)
    statuses: dict[str, RuleStatus] = {s.rule: s for s in result.rules}
    by_rule = result.by_rule()

    suite = ET.Element("testsuite", {"name": "gpuadvisor"})
    properties = ET.SubElement(suite, "properties")
    props = {
        "source": result.source.path,
        "source_kind": result.source.kind,
        "fail_on": threshold.value if threshold else "none",
    }
    for key in ("step_time_ms", "gpu_busy_fraction", "gpu_name"):
        if result.metrics.get(key) is not None:
            props[key] = str(result.metrics[key])
    for name, value in sorted(props.items()):
        ET.SubElement(properties, "property", {"name": name, "value": _clean(value)})

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for rule_id, meta in catalog.items():
        status = statuses.get(rule_id)
        findings = by_rule.get(rule_id, [])
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"gpuadvisor.{meta.category}",
                "name": _clean(f"{rule_id} {meta.name}"),
                "time": "0",
            },
        )
        counts["tests"] += 1
        internal = [f for f in findings if is_internal(f)]
        failing = [f for f in findings if fails(f, threshold)]
        passing = [f for f in findings if not is_internal(f) and not fails(f, threshold)]
        if internal or (status is not None and status.status == "error"):
            message = internal[0].message if internal else (status.detail if status else "")
            err = ET.SubElement(case, "error", {"message": _clean(message), "type": "internal_error"})
            err.text = _clean("\n\n".join(_describe(f) for f in internal) or message)
            counts["errors"] += 1
        elif failing:
            first = failing[0]
            message = first.title + (f" (+{len(failing) - 1} more)" if len(failing) > 1 else "")
            fail = ET.SubElement(case, "failure", {"message": _clean(message), "type": first.severity.value})
            fail.text = _clean("\n\n".join(_describe(f) for f in failing))
            counts["failures"] += 1
        elif status is not None and status.status in ("not_applicable", "deselected"):
            reason = status.status.replace("_", " ") + (f": {status.detail}" if status.detail else "")
            ET.SubElement(case, "skipped", {"message": _clean(reason)})
            counts["skipped"] += 1
        if passing:
            out = ET.SubElement(case, "system-out")
            out.text = _clean("\n\n".join(_describe(f) for f in passing))

    for key, count in counts.items():
        suite.set(key, str(count))
    suite.set("time", "0")
    root = ET.Element("testsuites", {"name": "gpuadvisor", **{k: str(v) for k, v in counts.items()}})
    root.append(suite)
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
