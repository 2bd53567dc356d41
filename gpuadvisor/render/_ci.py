"""Shared helpers of the CI renderers (markdown, junit, sarif): rule metadata, gate threshold, numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpuadvisor.errors import ConfigError
from gpuadvisor.model import Finding, RuleMeta, Severity
from gpuadvisor.render._format import fmt_number, fmt_pct, is_version_key, rule_sort_key
from gpuadvisor.words import Base

if TYPE_CHECKING:
    from gpuadvisor.result import AnalysisResult


def gate(fail_on: str | Severity | None, default: str | None) -> Severity | None:
    """The severity at or above which a finding fails the gate (None: no gate)."""
    value = default if fail_on is None else fail_on
    if value is None:
        return None
    if isinstance(value, Severity):
        return value
    lowered = value.lower()
    if lowered == "none":
        return None
    try:
        severity = Severity(lowered)
    except ValueError:
        raise ConfigError(f"--fail-on must be one of high, medium, low, none; got {value!r}") from None
    if severity is Severity.INFO:
        raise ConfigError("--fail-on info is not a gate: info findings carry no measured cost")
    return severity


def fails(finding: Finding, threshold: Severity | None) -> bool:
    """Same rule as AnalysisResult.exit_code: internal errors and info findings never fail the gate."""
    if threshold is None or finding.category.value == "internal" or finding.severity is Severity.INFO:
        return False
    return finding.severity.rank >= threshold.rank


def is_internal(finding: Finding) -> bool:
    return finding.category.value == "internal"


def rule_catalog(result: AnalysisResult) -> dict[str, RuleMeta]:
    """Metadata of every rule the result mentions (statuses and findings), in natural id order."""
    known = result.rule_docs
    out: dict[str, RuleMeta] = {}
    by_rule: Mapping[str, list[Finding]] = result.by_rule()
    ids = {s.rule for s in result.rules} | set(by_rule)
    names = {s.rule: s.name for s in result.rules}
    for rule_id in sorted(ids, key=rule_sort_key):
        meta = known.get(rule_id)
        if meta is None:
            findings = [f for f in by_rule.get(rule_id, []) if not is_internal(f)]
            first = findings[0] if findings else None
            name = names.get(rule_id) or (first.name if first else "") or rule_id.lower()
            category = first.category.value if first else "rules"
            summary = first.title if first else name
            meta = RuleMeta(rule_id, name, category, summary, summary, first.references if first else ())
        out[rule_id] = meta
    return out


def fmt_impact(impact: float | None, base: Base = Base.STEP) -> str:
    """"82.2%" (of the step: the column or the word "impact" says so), "87.5% per sample" (a finding whose
    remedy changes the batch: `gpuadvisor.model.impact_base`)."""
    if impact is None:
        return "n/a"
    return f"{impact * 100:.1f}%" + (" per sample" if base is Base.SAMPLE else "")


def fmt_metric(key: str, value: object) -> str:
    """Human form of one window metric, by the unit in its name."""
    if value is None:
        return "n/a"
    if isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, (int, float)):
        if key.endswith("_fraction") or key == "mfu" or key == "sm_use":
            return fmt_pct(float(value), 1)
        if key.endswith("_ms"):
            return f"{float(value):.2f} ms"
        if key.endswith("_us"):
            return f"{float(value):.1f} µs"
        if key.endswith("_pct"):
            return f"{float(value):.1f}%"
        if isinstance(value, int):
            return str(value) if is_version_key(key) else f"{value:,}"
        return fmt_number(float(value))
    return str(value)
