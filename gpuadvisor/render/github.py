"""GitHub Actions workflow annotations (`gpuadvisor analyze RUN --format github`), as `ruff --output-format
github` writes them: one workflow command per finding, which the Actions runner turns into an
annotation on the file and line (or on the run's summary when a finding has no source location).

    ::error title=gpuadvisor GA201 blocking-scalar-reads,file=train.py,line=36::GA201 ... Fix: ...

Levels: high -> error, medium -> warning, low and info -> notice; a rule's internal error is an error
annotation of its own. A last plain line gives the counts (and the gate's verdict with --fail-on).
Property values escape `%`, CR, LF, `:` and `,`; messages escape `%`, CR and LF (the runner's rules),
so no finding text can start a workflow command of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuadvisor.model import Finding, Severity, impact_base
from gpuadvisor.render._ci import fails, fmt_impact, gate, is_internal
from gpuadvisor.terminal import terminal_safe

if TYPE_CHECKING:
    from gpuadvisor.result import AnalysisResult

__all__ = ["render"]

_LEVELS = {Severity.HIGH: "error", Severity.MEDIUM: "warning", Severity.LOW: "notice", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, message: str, **properties: str | int | None) -> str:
    props = ",".join(f"{k}={escape_property(str(v))}" for k, v in properties.items() if v not in (None, ""))
    return f"::{level}{' ' + props if props else ''}::{escape_data(message)}"


def _annotation(finding: Finding) -> str:
    text = f"{finding.rule} {finding.title} (impact {fmt_impact(finding.impact, impact_base(finding))}, {finding.severity.value}). "
    text += finding.message.strip()
    if finding.recommendation:
        text += f"\nFix: {finding.recommendation.strip()}"
    source = next((loc for loc in finding.locations if loc.file), None)
    others = [loc.label() for loc in finding.locations if loc is not source]
    if others:
        text += "\nAlso at: " + "; ".join(others[:5]) + (f" (+{len(others) - 5} more)" if len(others) > 5 else "")
    return _command(
        _LEVELS[finding.severity],
        text,
        title=f"gpuadvisor {finding.rule} {finding.name}",
        file=source.file if source is not None else None,
        line=source.line if source is not None and source.line and source.line >= 1 else None,
    )


def render(result: AnalysisResult, *, fail_on: str | None = None) -> str:
    """The workflow commands, one per line, and a closing summary line."""
    result = terminal_safe(result)  # a CI log is a terminal too
    threshold = gate(fail_on, None)
    lines = []
    for finding in result.findings:
        if is_internal(finding):
            lines.append(_command("error", finding.message, title=f"gpuadvisor internal error in {finding.rule}"))
        else:
            lines.append(_annotation(finding))
    perf = [f for f in result.findings if not is_internal(f)]
    counts = ", ".join(
        f"{n} {s.value}" for s in Severity if (n := sum(1 for f in perf if f.severity is s))
    )
    # a plain line: the path (data) keeps it one line
    summary = f"gpuadvisor: {escape_data(result.source.path)}: {len(perf)} finding{'s' if len(perf) != 1 else ''}"
    summary += f" ({counts})" if counts else ""
    if threshold is not None:
        failing = sum(1 for f in perf if fails(f, threshold))
        summary += f"; --fail-on {threshold.value}: {'FAIL' if failing else 'pass'}"
    lines.append(summary)
    return "\n".join(lines) + "\n"
