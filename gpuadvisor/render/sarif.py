"""SARIF 2.1.0 for code-scanning dashboards (GitHub code scanning, Azure DevOps, IDE viewers).

One run; `tool.driver.rules` describes every rule the result mentions (from the rule's docstring);
one result per finding: `level` high -> error, medium -> warning, low/info -> note; a finding that
points at a source line gets a physical location relative to `%SRCROOT%` (the directory the script
ran from) with `region.startLine`; a finding about a kernel or an op gets a logical location instead;
internal errors of rules become tool execution notifications, not results.

A SARIF viewer opens the files its locations name on the machine that shows it: a path recorded on
another machine (an absolute path outside the recorded working directory, or one that climbs out of
it with `..`) is never written as a `file://` URI, which would open the reader's own file of that
name; it becomes a logical location (`kind` "module", the recorded path and line as its name).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuadvisor import __version__
from gpuadvisor.model import Finding, Location, RuleMeta, Severity, impact_base
from gpuadvisor.render._ci import fmt_impact, is_internal, rule_catalog
from gpuadvisor.render._format import rule_sort_key

if TYPE_CHECKING:
    from gpuadvisor.result import AnalysisResult

__all__ = ["INFORMATION_URI", "SARIF_SCHEMA", "SARIF_VERSION", "level_of", "render"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/gpuadvisor/"
SRCROOT = "%SRCROOT%"

_LEVELS = {Severity.HIGH: "error", Severity.MEDIUM: "warning", Severity.LOW: "note", Severity.INFO: "note"}


def level_of(severity: Severity) -> str:
    return _LEVELS[severity]


def _section(doc: str, title: str) -> str:
    """Text of one `Title\\n-----` section of a rule docstring ('' when absent)."""
    match = re.search(
        rf"^{re.escape(title)}\s*\n-+\s*\n(.*?)(?=^\S[^\n]*\n-+\s*$|\Z)", doc, re.M | re.S | re.I
    )
    return " ".join(match.group(1).split()) if match else ""


def _rule_descriptor(meta: RuleMeta) -> dict[str, Any]:
    why = _section(meta.doc, "Why it matters")
    full = f"{meta.summary} {why}".strip() if why else meta.summary
    descriptor: dict[str, Any] = {
        "id": meta.id,
        "name": meta.name,
        "shortDescription": {"text": meta.summary or meta.name},
        "fullDescription": {"text": full or meta.name},
        "help": {"text": meta.doc or meta.summary or meta.name},
        "defaultConfiguration": {"level": "warning"},
        "properties": {"category": meta.category, "tags": ["performance", meta.category]},
    }
    if meta.references:
        descriptor["helpUri"] = meta.references[0]
    return descriptor


def _relative_parts(path: str, root: str | None) -> list[str] | None:
    """The parts of `path` relative to `root` (the recorded working directory), or None when it lies
    outside: absolute elsewhere, a Windows drive, or climbing out with `..`."""
    posix = PurePosixPath(path.replace("\\", "/"))
    if PureWindowsPath(path).drive:
        return None
    if posix.is_absolute():
        if not root:
            return None
        try:
            posix = posix.relative_to(PurePosixPath(root))
        except ValueError:
            return None
    parts = [p for p in posix.parts if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return parts


def _physical(loc: Location, root: str | None) -> dict[str, Any] | None:
    assert loc.file is not None
    parts = _relative_parts(loc.file, root)
    if parts is None:
        return None
    artifact: dict[str, Any] = {"uri": quote("/".join(parts)), "uriBaseId": SRCROOT}
    physical: dict[str, Any] = {"artifactLocation": artifact}
    if loc.line is not None and loc.line >= 1:
        region: dict[str, Any] = {"startLine": int(loc.line)}
        if loc.code:
            region["snippet"] = {"text": loc.code}
        physical["region"] = region
    return {"physicalLocation": physical}


def _recorded_path(loc: Location) -> dict[str, Any]:
    """A source location outside the recorded working directory: named, never a URI to open."""
    name = loc.label()
    return {"logicalLocations": [{"name": name, "fullyQualifiedName": name, "kind": "module"}]}


def _logical(loc: Location) -> dict[str, Any] | None:
    if loc.kernel:
        return {"logicalLocations": [{"name": loc.kernel, "kind": "function", "decoratedName": loc.kernel}]}
    if loc.op:
        return {"logicalLocations": [{"name": loc.op, "kind": "function"}]}
    if loc.function:
        return {"logicalLocations": [{"name": loc.function, "kind": "function"}]}
    return None


def _locations(finding: Finding, root: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for loc in finding.locations:
        entry = (_physical(loc, root) or _recorded_path(loc)) if loc.file else _logical(loc)
        if entry is not None:
            out.append(entry)
    return out


def _fingerprint(finding: Finding) -> str:
    primary = finding.locations[0].label() if finding.locations else ""
    return hashlib.sha256(f"{finding.rule}|{primary}|{finding.title}".encode()).hexdigest()[:32]


def _result(finding: Finding, rule_index: int, root: str | None) -> dict[str, Any]:
    text = f"{finding.title}. {finding.message}".strip()
    if finding.recommendation:
        text += f" Fix: {finding.recommendation}"
    entry: dict[str, Any] = {
        "ruleId": finding.rule,
        "ruleIndex": rule_index,
        "level": level_of(finding.severity),
        "message": {"text": text},
        "partialFingerprints": {"gpuadvisorFinding/v1": _fingerprint(finding)},
        "properties": {
            "severity": finding.severity.value,
            "category": finding.category.value,
            "impact": finding.to_dict()["impact"],
            "impactText": fmt_impact(finding.impact, impact_base(finding)),
            "evidence": finding.to_dict()["evidence"],
        },
    }
    locations = _locations(finding, root)
    if locations:
        entry["locations"] = locations
    return entry


def render(result: AnalysisResult, *, fail_on: str | None = None) -> str:
    """The SARIF 2.1.0 log as JSON text (sorted keys). `fail_on` is recorded as a run property only:
    SARIF levels already carry the severity, and code-scanning gates are configured in the dashboard."""
    catalog = rule_catalog(result)
    rule_ids = list(catalog)
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}
    cwd = result.run.manifest.get("cwd") if result.run is not None else None
    root = cwd if isinstance(cwd, str) and cwd.startswith("/") else None
    results = [_result(f, index[f.rule], root) for f in result.findings if not is_internal(f)]
    notifications = [
        {
            "level": "error",
            "message": {"text": f.message},
            "descriptor": {"id": f.rule},
        }
        for f in result.findings
        if is_internal(f)
    ]
    invocation: dict[str, Any] = {"executionSuccessful": True}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    not_applicable = sorted((s.rule for s in result.rules if s.status == "not_applicable"), key=rule_sort_key)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gpuadvisor",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": [_rule_descriptor(catalog[r]) for r in rule_ids],
                    }
                },
                "invocations": [invocation],
                "columnKind": "unicodeCodePoints",
                "results": results,
                "properties": {
                    "source": result.source.to_dict(),
                    "failOn": fail_on,
                    "notApplicableRules": not_applicable,
                    "notes": list(result.notes),
                },
            }
        ],
    }
    return json.dumps(log, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
