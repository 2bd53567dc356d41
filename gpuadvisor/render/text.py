"""Terminal summary: the top findings first (severity, impact, location, the recommendation's first
lines), then the key metrics, then the rules that could not run, in one line each.

Plain text, no colour codes, at most ~100 columns, deterministic (snapshot-testable).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from gpuadvisor.model import Finding, Severity
from gpuadvisor.result import AnalysisResult

__all__ = ["render"]

MAX_FINDINGS = 10
REC_LINES = 3
WIDTH = 100

# (window key, label, kind) shown in the metrics line, when present.
_KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("step_time_ms", "step", "ms"),
    ("steps_analyzed", "steps analyzed", "int"),
    ("gpu_busy_fraction", "GPU busy", "pct"),
    ("copy_fraction", "copies", "pct"),
    ("dataloader_wait_fraction", "data wait", "pct"),
    ("sync_blocked_fraction", "host blocked in syncs", "pct"),
    ("kernels_per_step", "kernels/step", "num"),
    ("tensor_core_fraction", "tensor-core matmul", "pct"),
    ("mfu", "MFU", "pct"),
)
_IDLE = (
    ("idle_data_loading_fraction", "data loading"),
    ("idle_host_sync_fraction", "host sync"),
    ("idle_launch_overhead_fraction", "launch overhead"),
    ("idle_other_fraction", "other"),
)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _fmt(value: Any, kind: str) -> str | None:
    number = _num(value)
    if number is None:
        return None
    if kind == "pct":
        return f"{100 * number:.0f}%" if number >= 0.01 or number == 0 else f"{100 * number:.1f}%"
    if kind == "ms":
        return f"{number:.2f} ms" if number < 100 else f"{number:.0f} ms"
    if kind == "int":
        return f"{int(number)}"
    return f"{number:.3g}"


def _metrics_lines(metrics: Mapping[str, Any]) -> list[str]:
    parts = []
    for key, label, kind in _KEY_METRICS:
        text = _fmt(metrics.get(key), kind)
        if text is not None:
            parts.append(f"{label} {text}")
    lines = []
    if parts:
        lines.append("Metrics: " + ", ".join(parts))
    idle = []
    for key, label in _IDLE:
        number = _num(metrics.get(key))
        if number is not None and number > 0.005:
            idle.append(f"{label} {_fmt(number, 'pct')}")
    if idle:
        lines.append("GPU idle by cause (share of step): " + ", ".join(idle))
    return lines


def _impact(f: Finding) -> str:
    return "   -" if f.impact is None else f"{100 * f.impact:3.0f}%"


def _finding_lines(index: int, f: Finding) -> list[str]:
    head = f"{index:2d}. {f.severity.value.upper():<6} {_impact(f)}  {f.rule} {f.name}: {f.title}"
    lines = [head]
    indent = "      "
    for loc in f.locations[:3]:
        where = loc.label()
        code = f"  {loc.code}" if loc.code else ""
        lines.append(f"{indent}at {where}{code}")
    if len(f.locations) > 3:
        lines.append(f"{indent}(+{len(f.locations) - 3} more locations)")
    message = " ".join(f.message.split())
    lines.extend(textwrap.wrap(message, WIDTH, initial_indent=indent, subsequent_indent=indent)[:3])
    from gpuadvisor.verify.results import summary_line

    verified = summary_line(f)
    if verified:
        lines.extend(textwrap.wrap(verified, WIDTH, initial_indent=f"{indent}Verify: ", subsequent_indent=indent))
    rec = " ".join(f.recommendation.split())
    wrapped = textwrap.wrap(rec, WIDTH, initial_indent=f"{indent}Fix: ", subsequent_indent=f"{indent}     ")
    lines.extend(wrapped[:REC_LINES])
    if len(wrapped) > REC_LINES:
        lines.append(f"{indent}     ... (full text: --format json or the HTML report)")
    return lines


def render(result: AnalysisResult, *, fail_on: str | None = None, max_findings: int = MAX_FINDINGS) -> str:
    """The terminal summary as one string (ends with a newline)."""
    env = result.environment
    gpu = env.get("gpu")
    torch = env.get("torch")
    header = f"gpuadvisor: {result.source.path} ({result.source.kind}"
    if len(result.source.ranks) > 1:
        header += f", {len(result.source.ranks)} ranks"
    header += ")"
    if gpu:
        header += f"  GPU: {gpu}"
    if torch:
        header += f"  torch {torch}"
    lines = [header]
    lines.extend(_metrics_lines(result.metrics))
    lines.append("")

    real = [f for f in result.findings if f.category.value != "internal"]
    internal = [f for f in result.findings if f.category.value == "internal"]
    if real:
        counts = {s: sum(1 for f in real if f.severity is s) for s in Severity}
        summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
        lines.append(f"{len(real)} finding{'s' if len(real) != 1 else ''} ({summary}), highest impact first:")
        lines.append("")
        for i, f in enumerate(real[:max_findings], 1):
            lines.extend(_finding_lines(i, f))
            lines.append("")
        if len(real) > max_findings:
            lines.append(
                f"... and {len(real) - max_findings} more (--format json or the HTML report for all)"
            )
            lines.append("")
    else:
        lines.append("No findings.")
        lines.append("")
    for f in internal:
        lines.append(f"Internal error: {f.message}")

    not_applicable = [r for r in result.rules if r.status == "not_applicable"]
    by_reason: dict[str, list[str]] = {}
    for r in sorted(not_applicable, key=lambda r: r.rule):
        by_reason.setdefault(r.detail, []).append(r.rule)
    for reason, ids in by_reason.items():
        lines.extend(
            textwrap.wrap(f"Not applicable ({reason}): {', '.join(ids)}", WIDTH, subsequent_indent="  ")
        )
    # Degraded flags come with a sentence that says the same thing: show the sentence once.
    shown: set[str] = set()
    for note in result.notes:
        if note.startswith("degraded: ") or note in shown:
            continue
        shown.add(note)
        lines.extend(textwrap.wrap(f"Note: {note}", WIDTH, subsequent_indent="  "))
    if fail_on:
        code = result.exit_code(fail_on)
        verdict = "FAIL" if code else "pass"
        lines.append(f"Gate --fail-on {fail_on}: {verdict}")
    return "\n".join(lines).rstrip("\n") + "\n"
